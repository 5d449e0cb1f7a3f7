"""Shared base for every config section: strict, typed, immutable after validation; and the custom Ray resources
a stage's actors may reserve."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

# reserved by each section's own keys (num_cpus, num_gpus, ...), never through `resources`
_RAY_BUILTIN_RESOURCES = frozenset({"CPU", "GPU", "memory", "object_store_memory"})


class Section(BaseModel):
    """A config section. Unknown keys are errors; values are validated on assignment too.

    `implicit_values` names keys added after configs and completed stages were written, each with the value that
    keeps the earlier behaviour: a key at that value is left out of the dump, so a config that never sets it keeps
    its stage hashes (and completed stages stay reusable) whichever release wrote them."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)
    implicit_values: ClassVar[dict[str, Any]] = {}

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for key, value in self.implicit_values.items():
            if getattr(self, key) == value:
                data.pop(key, None)
        return data


def _custom_resources(value: dict[str, float]) -> dict[str, float]:
    builtin = sorted(set(value) & _RAY_BUILTIN_RESOURCES)
    if builtin:
        raise ValueError(
            f"{value}: {builtin} are Ray's own resources: reserve them with the section's CPU and GPU keys; "
            "`resources` names custom resources that nodes declare (`ray start --resources`, rayStartParams in KubeRay)"
        )
    negative = sorted(name for name, amount in value.items() if amount <= 0)
    if negative:
        raise ValueError(f"{value}: custom resource amounts must be > 0: {negative}")
    return value


CustomResources = Annotated[dict[str, float], AfterValidator(_custom_resources)]


def resources_field(what: str) -> Any:
    """The `resources` key of a section whose `what` are Ray actors or workers."""
    return Field(
        default_factory=dict,
        description=f"custom Ray resources each of {what} reserves besides CPUs and GPUs, e.g. {{train_node: 0.01}}: "
        "it runs only on nodes that declare them (`ray start --resources`), which pins stages to node groups",
    )
