"""Vendor the ray.io/v1 openAPIV3Schema of KubeRay's RayJob and RayCluster CRDs into this folder.

    python k8s/crds/vendor.py KUBERAY_CHECKOUT [REF]     (REF: a tag or commit; default v1.7.0)

Reads ray-operator/config/crd/bases/ray.io_{rayjobs,rayclusters}.yaml at REF with `git show` (no
work tree needed), keeps the `v1` version's openAPIV3Schema only, and writes it as YAML headed by
the commit it came from. tests/test_k8s.py validates k8s/*.yaml against these files; bump REF
when the cluster's operator is upgraded and re-run the tests.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
CRDS = {"RayJob": "ray.io_rayjobs.yaml", "RayCluster": "ray.io_rayclusters.yaml"}
SOURCE = "ray-operator/config/crd/bases"


def git(checkout: str, *args: str) -> str:
    return subprocess.run(["git", "-C", checkout, *args], check=True, capture_output=True,
                          text=True).stdout


def vendor(checkout: str, ref: str) -> None:
    commit = git(checkout, "rev-parse", f"{ref}^{{commit}}").strip()
    for kind, name in CRDS.items():
        crd = yaml.load(git(checkout, "show", f"{commit}:{SOURCE}/{name}"), Loader=yaml.CSafeLoader)
        assert crd["spec"]["names"]["kind"] == kind, (name, crd["spec"]["names"])
        (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
        header = (f"# openAPIV3Schema of {kind} (ray.io/v1), verbatim from ray-project/kuberay\n"
                  f"# {SOURCE}/{name} at {ref} (commit {commit}).\n"
                  "# Regenerate: python k8s/crds/vendor.py KUBERAY_CHECKOUT REF\n")
        body = yaml.dump(version["schema"]["openAPIV3Schema"], Dumper=yaml.CSafeDumper,
                         sort_keys=False, width=100)
        (HERE / name.replace(".yaml", ".v1.schema.yaml")).write_text(header + body)


if __name__ == "__main__":
    vendor(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "v1.7.0")
