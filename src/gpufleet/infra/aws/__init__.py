"""``provider: aws``: the Pulumi component of a GPU cluster on AWS, and its offline mocks.

``GpuClusterAws`` and ``GpuClusterAwsArgs`` are loaded on first use (PEP 562), so that the pure modules
of this package (``rules``, ``interfaces``), which the preflight checks read, import no cloud SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpufleet.infra.aws.component import GpuClusterAws, GpuClusterAwsArgs

__all__ = ["GpuClusterAws", "GpuClusterAwsArgs"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from gpufleet.infra.aws import component

        return getattr(component, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
