"""Serving korral beyond its process: the SI over gRPC (and, on the REST branch, /ws/v1 and metrics)."""
