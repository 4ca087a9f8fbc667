"""The relay: claim → produce → settle, per lane, to Kafka.

`lanes` decides which lanes this relay owns, `records` turns an outbox row into a Kafka record,
`retry` classifies failures and spaces out retries, `publisher` talks to the Kafka clusters and
`relay` runs the loop. All SQL lives in events_api/storage/relay.py.
"""
