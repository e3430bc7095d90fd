"""Fixtures for tests against the real Kubernetes control plane (scripts/k8s, docs/testing-k8s.md).

``k8s_cluster`` (session): etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
on 127.0.0.1 with fake c5n.2xlarge and m5.large Nodes; a ``ControlPlane`` with ``kubeconfig``,
``api_url``, ``token``, ``ca_file``, ``bin_dir`` (kubectl, helm), ``env()``, ``kubectl()``,
``kubectl_json()``, ``helm()``, ``apply()``, ``add_nodes()``, ``stop_heartbeat()`` ...
``k8s_namespace`` (function): a fresh namespace, deleted afterwards.

Every test in this directory is marked ``k8s``. A missing build fails the tests (never skips).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[2]
if str(_REPO) not in sys.path:  # scripts/k8s/cluster.py is imported as scripts.k8s.cluster
    sys.path.insert(0, str(_REPO))

from scripts.k8s.cluster import BuildMissingError, ControlPlane, start  # noqa: E402

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.k8s)
            # kopf's in-process runner (KopfRunner) leaves aiohttp sockets for the garbage
            # collector now and then; the warning surfaces in whichever test runs next. That
            # is the library's housekeeping, not ours: these tests do not turn it into an error.
            item.add_marker(pytest.mark.filterwarnings("ignore::ResourceWarning"))
            item.add_marker(
                pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
            )


@pytest.fixture(scope="session")
def k8s_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """The control plane, started once per test session and stopped at its end."""
    workdir = tmp_path_factory.mktemp("k8s")
    try:
        plane = start(workdir, log=sys.stderr)
    except BuildMissingError as e:
        missing = str(e)
    else:
        missing = ""
    if missing:  # fail, never skip: the tests must run wherever the suite runs
        pytest.fail(missing, pytrace=False)
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def k8s_namespace(k8s_cluster: ControlPlane) -> Iterator[str]:
    """A new namespace for one test; deleted (without waiting) when the test ends."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    k8s_cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        k8s_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
