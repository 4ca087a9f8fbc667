"""The distribution version, in one place (also sent in the User-Agent)."""

__version__ = "0.1.0"
