"""Clients the processes share: Temporal (pydantic payloads) and Kubernetes."""

from __future__ import annotations

import logging

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from api import search_attributes
from worker.settings import Settings

log = logging.getLogger(__name__)


async def connect_temporal(settings: Settings) -> Client:
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        api_key=settings.temporal_api_key,
        tls=settings.temporal_tls or bool(settings.temporal_api_key),
        data_converter=pydantic_data_converter,
    )


async def register_search_attributes(client: Client, namespace: str) -> None:
    """Add our search attributes if missing; safe to repeat (see TEMPORAL.md's dev-server trap)."""
    existing = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    missing = {
        key.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
        for key in search_attributes.ALL
        if key.name not in existing.custom_attributes
    }
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=namespace, search_attributes=missing)
        )
        log.info("registered search attributes %s", sorted(missing))


def kube_api_client(settings: Settings) -> k8s.ApiClient:
    """A Kubernetes client from the configured kubeconfig, else $KUBECONFIG, else in-cluster."""
    configuration = k8s.Configuration()
    if settings.kubeconfig is not None:
        k8s_config.load_kube_config(
            config_file=str(settings.kubeconfig), client_configuration=configuration
        )
    else:
        try:
            k8s_config.load_kube_config(client_configuration=configuration)
        except k8s_config.ConfigException:
            k8s_config.load_incluster_config(client_configuration=configuration)
    # Activities run in a thread pool: give urllib3 enough connections for all of them.
    configuration.connection_pool_maxsize = 64
    return k8s.ApiClient(configuration)
