"""A forwarder in a process of its own, for the tests that SIGKILL it mid-batch:
`python -m tests.sdk.forwarder_process DATABASE_URL API_URL API_KEY BATCH_SIZE`."""

from __future__ import annotations

import sys

from events_api_client import EventsClient
from events_api_client.outbox import Forwarder, outbox_table
from sqlalchemy import MetaData, create_engine


def main(database_url: str, api_url: str, api_key: str, batch_size: str) -> None:
    engine = create_engine(database_url)
    with EventsClient(api_url, api_key) as client:
        Forwarder(engine, client, outbox_table(MetaData()), batch_size=int(batch_size), poll_interval=0.05).run()


if __name__ == "__main__":
    main(*sys.argv[1:])
