"""``provider: aws``: the Pulumi component of a GPU cluster on AWS, its backend and its offline mocks.

Modules: ``backend.py`` (what ``gpufleet up/status/down`` drive), ``component.py`` (the component) and
its parts, ``mocks.py``, ``leftovers.py``. The AWS facts it shares with the preflight checks live in
``gpufleet.catalog.aws`` and ``gpufleet.catalog.aws_interfaces`` (no cloud SDK).
"""

from gpufleet.infra.aws.backend import backend
from gpufleet.infra.aws.component import TYPE_TOKEN, GpuClusterAws, GpuClusterAwsArgs
from gpufleet.infra.aws.mocks import AwsMockCloud

__all__ = ["TYPE_TOKEN", "AwsMockCloud", "GpuClusterAws", "GpuClusterAwsArgs", "backend"]
