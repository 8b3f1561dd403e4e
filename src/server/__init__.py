"""Serving a core to other processes: YuniKorn's REST API and its Prometheus metrics.

Importing this package is light (prometheus-client only); the HTTP server (aiohttp, the ``serve``
extra) is imported when ``Core.serve_rest`` is called.
"""
