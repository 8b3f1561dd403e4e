"""Serving a core to other processes: the SI over gRPC (``korral.connect``), YuniKorn's REST API and
its Prometheus metrics.

Importing this package is light (prometheus-client only); grpcio is imported for ``Core.serve_grpc``
and ``korral.connect``, the HTTP server (aiohttp, the ``serve`` extra) when ``Core.serve_rest`` is
called.
"""
