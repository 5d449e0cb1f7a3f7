"""Shared base for every config section: strict, typed, immutable after validation."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A config section. Unknown keys are errors; values are validated on assignment too."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)
