# Type stub for the module grpcio-tools generates (make proto): it builds its classes at import time,
# so a type checker sees every name in it as Any.
from typing import Any

def __getattr__(name: str) -> Any: ...
