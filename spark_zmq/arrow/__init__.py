"""Arrow IPC from untrusted senders, read within bounds: the bottom layer every package that
takes Arrow off a socket uses (the source's decoder and spool, the request-reply worker's
requests, the replies ``spark_zmq.request`` reads in ``requester``).

- ``guard``: the entry point: check a message's metadata, decode, validate (``read_batches``,
  ``read_message``, ``count_rows``, ``MalformedArrowError``);
- ``ipc``: the bounds-checked reader of the IPC flatbuffers (step 1 of ``guard``);
- ``conform``: conversion of checked batches to a declared schema (step 3).

Apart from ``ingest`` so that a worker or a request-reply caller, which spool nothing, does
not depend on the ingest core. It imports nothing of the package and nothing of Spark
(``tests/test_layers.py`` checks it).
"""
