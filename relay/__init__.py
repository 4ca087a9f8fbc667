"""The relay: claim → produce → settle, per lane, to Kafka (issue 4)."""
