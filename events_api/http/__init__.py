"""The HTTP layer: parse, authorise, call a domain function, render. No SQL here."""
