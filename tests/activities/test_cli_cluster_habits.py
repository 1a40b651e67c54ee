"""kubectl's habits against Kubernetes' own API server: `-l` selects the NodePools the API
server matches, `--context` picks the kubeconfig's context (and a context it does not have is
an error, not the in-cluster identity), and the shipped CRD takes `limits.cpu: 1000` as
Kubernetes reads a quantity."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from kubernetes import client

from cli.cluster_reads import listed
from cli.connect import cli_settings
from sim.controlplane.cluster import KubernetesControlPlane

GROUP, VERSION = "cloudburst.io", "v1alpha1"


def _pool(name: str, labels: dict[str, str], limits: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodePool",
        "metadata": {"name": name, "labels": labels},
        "spec": {"limits": limits},
    }


def test_selector_context_and_integer_quantities(
    cluster: KubernetesControlPlane,
    kube_api_client: client.ApiClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    """Without `listed` and `kube_context`, `pools list -l` and `--context` were refused (No
    such option); without the int-or-string CRD the API server refused `cpu: 1000` ("must be
    of type string")."""
    custom = client.CustomObjectsApi(kube_api_client)
    for name, team, cpu in (("a", "red", 1000), ("b", "blue", "8")):
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, "nodepools", _pool(name, {"team": team}, {"cpu": cpu})
        )
    stored = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "nodepools", "a")
    assert stored["spec"]["limits"]["cpu"] == 1000
    with pytest.raises(client.ApiException) as refused:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, "nodepools", _pool("c", {}, {"cpu": -1})
        )
    assert refused.value.status == 422

    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    context = yaml.safe_load(kubeconfig.read_text())["current-context"]
    settings = cli_settings(kubeconfig=kubeconfig, context=context)
    keep = listed(settings, "nodepools", namespace, "team=red")
    assert keep(namespace, "a") and not keep(namespace, "b")
    assert not keep("elsewhere", "a")
    everywhere = listed(settings, "nodepools", None, "team in (red,blue)")
    assert everywhere(namespace, "a") and everywhere(namespace, "b")

    with pytest.raises(typer.Exit):
        listed(cli_settings(kubeconfig=kubeconfig, context="no-such"), "nodepools", None, "x=y")
