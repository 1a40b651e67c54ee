"""The worker's ledger of shared bare-metal machines: who holds or last held each one and where
its wipe stands (`cluster/machine_hygiene.py` decides on it), kept in the ConfigMap
`cloudburst-machines` of the worker's own namespace — which no tenant may write or read — so
that it is the same whichever tenant's NodeClass, seed server or BMC address reaches a
machine.

One data key per machine (`machine_key`), its record as JSON. Every change is a compare-and-set:
read, decide, replace with the resourceVersion read (409: read again and decide again), so two
workers, or two claims of one, never both take a machine.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from activities.kube_reads import ConfigMapReader
from activities.providers.base import Provider, ProviderError, SharedMachines
from api.nodeclass import ProviderBlock
from cluster.machine_hygiene import MachineRecord
from cluster.tenancy import Tenancy

log = logging.getLogger(__name__)

MACHINES_CONFIGMAP = "cloudburst-machines"
_ATTEMPTS = 8

Change = Callable[[MachineRecord | None], MachineRecord | None]


class LedgerUnavailable(ProviderError):
    """The ledger could not be read or written: no machine is taken or freed on a guess."""

    def __init__(self, message: str) -> None:
        super().__init__("redfish", message)


class KubeMachineLedger:
    """The ledger in `namespace` (the worker's). `reader` alone serves reads (planning's);
    changes need `core`."""

    def __init__(
        self, namespace: str, reader: ConfigMapReader, core: k8s.CoreV1Api | None = None
    ) -> None:
        self._namespace = namespace
        self._reader = reader
        self._core = core

    def read(self, key: str) -> MachineRecord | None:
        return _record(self._data(self._load()), key)

    def read_all(self) -> dict[str, MachineRecord]:
        """Every machine's record, in one read."""
        data = self._data(self._load())
        return {key: found for key in data if (found := _record(data, key)) is not None}

    def change(self, key: str, step: Change) -> MachineRecord | None:
        """Apply `step` to the machine's record (None: none yet) and store what it returns
        (None: leave it as it is); the record as it stands afterwards."""
        if self._core is None:
            raise LedgerUnavailable("the machine ledger was opened for reading only")
        for _ in range(_ATTEMPTS):
            config_map = self._load()
            data = self._data(config_map)
            current = _record(data, key)
            wanted = step(current)
            if wanted is None or wanted == current:
                return current
            data[key] = json.dumps(wanted.to_data(), sort_keys=True)
            try:
                if config_map is None:
                    self._core.create_namespaced_config_map(
                        self._namespace,
                        k8s.V1ConfigMap(
                            metadata=k8s.V1ObjectMeta(
                                name=MACHINES_CONFIGMAP,
                                labels={"app.kubernetes.io/managed-by": "cloudburst"},
                            ),
                            data=data,
                        ),
                    )
                else:
                    config_map.data = data
                    self._core.replace_namespaced_config_map(
                        MACHINES_CONFIGMAP, self._namespace, config_map
                    )
            except ApiException as err:
                if err.status in (409, 422):
                    continue  # someone else changed it (or created it) first: decide again
                raise LedgerUnavailable(
                    f"cannot write the machine ledger ConfigMap {self._namespace}/"
                    f"{MACHINES_CONFIGMAP}: HTTP {err.status}"
                ) from None
            return wanted
        raise LedgerUnavailable(
            f"the machine ledger {self._namespace}/{MACHINES_CONFIGMAP} kept changing under "
            f"{_ATTEMPTS} attempts"
        )

    def _load(self) -> Any:
        try:
            return self._reader.read_namespaced_config_map(MACHINES_CONFIGMAP, self._namespace)
        except ApiException as err:
            if err.status == 404:
                return None
            raise LedgerUnavailable(
                f"cannot read the machine ledger ConfigMap {self._namespace}/"
                f"{MACHINES_CONFIGMAP}: HTTP {err.status}"
            ) from None

    @staticmethod
    def _data(config_map: Any) -> dict[str, str]:
        if config_map is None:
            return {}
        return dict(config_map.data or {})


def _record(data: dict[str, str], key: str) -> MachineRecord | None:
    raw = data.get(key)
    if raw is None:
        return None
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        # Not understood: held by nobody known, so nobody takes the machine on a guess.
        log.warning("machine ledger entry %s is not a record; the machine is not offered", key)
        return MachineRecord.from_data({"state": "?"})
    return MachineRecord.from_data(parsed)


def tenant_provider(
    cls: type[Provider],
    block: ProviderBlock,
    credential: str | None,
    namespace: str,
    tenancy: Tenancy,
    reader: ConfigMapReader,
    core: k8s.CoreV1Api | None = None,
) -> Provider:
    """A provider acting for `namespace`; one whose machines pass between tenants is given the
    worker's ledger of them (read through `reader`, changed through `core`: None for a
    provider that only reads its catalog) and the operator's wipe image."""
    if not cls.shares_machines:
        return cls(block, credential, namespace)
    ledger = KubeMachineLedger(tenancy.worker_namespace, reader, core)
    return cls(
        block,
        credential,
        namespace,
        shared=SharedMachines(ledger, tenancy.machine_wipe_image_url),
    )
