"""The spec's scheduler block and the Kubernetes provider: what is refused, with the field and the fix."""

from __future__ import annotations

import copy

import pytest
import yaml

from gpufleet.errors import SpecError
from gpufleet.spec import parse_spec
from gpufleet.spec.model import SchedulerKind

KUBERNETES = {
    "name": "eks",
    "provider": {"kind": "kubernetes", "kubeconfig": "kubeconfig", "context": "eks"},
    "scheduler": {
        "kind": "kubernetes",
        "kubernetes": {"image": "public.ecr.aws/hpc-cloud/nccl-tests:latest"},
    },
    "node_groups": [{"name": "gpu", "roles": ["compute"], "instance_type": "p5.48xlarge", "count": 2}],
    "fabric": "efa",
}
LOCAL = {
    "name": "demo",
    "provider": "local",
    "node_groups": [
        {"name": "head", "roles": ["controller"], "instance_type": "local"},
        {"name": "cpu", "roles": ["compute"], "instance_type": "local", "count": 2},
    ],
}


def changed(base: dict, change: dict) -> str:
    data = copy.deepcopy(base)
    for dotted, value in change.items():
        node = data
        *parents, last = dotted.split(".")
        for part in parents:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return yaml.safe_dump(data)


def test_a_kubernetes_spec_reads_and_slurm_is_the_default():
    spec = parse_spec(yaml.safe_dump(KUBERNETES), source="eks.yaml", base_dir="/specs")
    assert spec.scheduler.kind is SchedulerKind.KUBERNETES and spec.provider.kubeconfig == "/specs/kubeconfig"
    options = spec.scheduler.kubernetes
    assert options is not None and options.namespace == "default" and options.job_api == "mpijob"
    assert parse_spec(yaml.safe_dump(LOCAL)).scheduler.kind is SchedulerKind.SLURM


CASES = [
    (KUBERNETES, {"scheduler": None}, "scheduler.kind",
     "provider kubernetes runs jobs as pods, not through Slurm"),
    (LOCAL, {"scheduler": "kubernetes"}, "scheduler.kubernetes", "needs its options, at least the image"),
    (LOCAL, {"scheduler": {"kind": "kubernetes", "kubernetes": {"image": "a/b:1"}}}, "provider.kind",
     "gpufleet does not make one on 'local' yet: set provider: {kind: kubernetes"),
    (KUBERNETES, {"scheduler.kind": "slurm"}, "scheduler.kubernetes", "read only with kind: kubernetes"),
    (KUBERNETES, {"node_groups": [{"name": "head", "roles": ["controller"], "instance_type": "m7i.xlarge"},
                                   {"name": "gpu", "roles": ["compute"], "instance_type": "p5.48xlarge"}]},
     "node_groups[0].roles (line 7)", "no Slurm controller to make: drop the group 'head'"),
    (KUBERNETES, {"fabric": "tcpxo"}, "fabric.kind", "receive-datapath manager"),
    (KUBERNETES, {"software": {"container_image": "nvcr.io#nvidia/pytorch:25.01-py3"}},
     "software.container_image", "every pod runs scheduler.kubernetes.image"),
    (KUBERNETES, {"validation": {"training": {"enabled": True}}}, "scheduler.kubernetes.shared_volume",
     "ReadWriteMany PersistentVolumeClaim"),
    (KUBERNETES, {"scheduler.kubernetes.image": "nccl-tests"}, "scheduler.kubernetes.image",
     "with a tag or a digest"),
    (KUBERNETES, {"scheduler.kubernetes.namespace": "Team_A"}, "scheduler.kubernetes.namespace",
     "a Kubernetes name"),
    (KUBERNETES, {"scheduler.kubernetes.node_selector": {"bad key!": "x"}},
     "scheduler.kubernetes.node_selector", "is not a Kubernetes label key"),
    (KUBERNETES, {"scheduler.kubernetes.job_api": "trainjob"}, "scheduler.kubernetes.job_api", "mpijob"),
    (KUBERNETES, {"filesystem": {"kind": "nfs", "server": "s", "export": "/e"}}, "filesystem.kind",
     "not available with provider 'kubernetes'"),
]  # fmt: skip


@pytest.mark.parametrize(("base", "change", "where", "message"), CASES)
def test_what_is_refused_names_the_field_and_the_fix(base, change, where, message):
    with pytest.raises(SpecError) as caught:
        parse_spec(changed(base, change), source="t.yaml")
    text = str(caught.value)
    assert where in text and message in text, text
    assert "{{" not in text and "Traceback" not in text, text
