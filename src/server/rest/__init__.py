"""REST serving: YuniKorn's /ws/v1 routes, their DAOs, bounds and the event stream."""
