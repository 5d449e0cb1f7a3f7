"""Resources section: what the cluster can hold, used to reject impossible worker counts before any work."""

from __future__ import annotations

from pydantic import Field

from embedforge.config.base import Section


class ResourcesConfig(Section):
    """Declared cluster capacity. When set, every stage's requested workers are checked against it."""

    num_cpus: float | None = Field(None, gt=0)
    num_gpus: float | None = Field(None, ge=0)
    object_store_memory_gb: float | None = Field(None, gt=0)
