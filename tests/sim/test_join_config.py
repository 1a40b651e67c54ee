"""What a simulated machine reads from its user data: the JoinConfiguration the first-boot
script writes, as `kubeadm join` reads it."""

from __future__ import annotations

import pytest

from sim.kubelet import JoinError, check_node_labels, parse_join_config


def test_parse_join_config_v1beta3_map_args() -> None:
    data = """x <<'CLOUDBURST_JOIN_CONFIG'
apiVersion: kubeadm.k8s.io/v1beta3
kind: JoinConfiguration
discovery:
  bootstrapToken: {apiServerEndpoint: "a:6443", token: "abcdef.0123456789abcdef", caCertHashes: []}
nodeRegistration:
  name: n
  kubeletExtraArgs: {node-labels: "a=b", node-ip: 10.0.0.9}
CLOUDBURST_JOIN_CONFIG
"""
    cfg = parse_join_config(data)
    assert cfg.node_labels == {"a": "b"} and cfg.node_ip == "10.0.0.9" and cfg.taints == []


def test_a_kubelet_refuses_a_reserved_kubernetes_io_label() -> None:
    check_node_labels({"node.kubernetes.io/instance-type": "x", "team": "a"})
    with pytest.raises(JoinError, match=r"reserved kubernetes\.io label"):
        check_node_labels({"node-role.kubernetes.io/control-plane": ""})
