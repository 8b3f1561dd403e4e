"""The one kind of record korral passes around: a frozen attrs class with slots, built by keyword.

Every message between actors (``korral.actors.messages``, ``korral.actors.rm_messages``), every operation
an owner tells the scheduler's view (``korral.model.view_ops``) and every snapshot (``korral.info``) is
declared with ``@frozen``: immutable, so a value crossing actors cannot change under its reader; keyword
only, so a field moved or renamed cannot land in another one; slots, so the many small ones cost little.
(The two records made once per ask and per allocation, ``AskSpec`` and ``Allocation``, are msgspec structs
with the same three properties, for their build cost on the hot path.)
"""

from __future__ import annotations

from typing import TypeVar, dataclass_transform

import attrs

_T = TypeVar("_T")


# attrs.frozen(slots=True, kw_only=True) under a short name; dataclass_transform tells type checkers
# what it makes
@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(attrs.field,))
def frozen(cls: type[_T]) -> type[_T]:
    return attrs.frozen(slots=True, kw_only=True)(cls)
