"""Cloud providers behind one interface; modules are imported only when a provider is used."""

from __future__ import annotations

import importlib

from activities.providers.base import Provider

# provider name -> "module:Class"; SDK imports are heavy, so each loads on first use.
_PROVIDER_CLASSES: dict[str, str] = {
    "fake": "activities.providers.fake:FakeProvider",
    "aws": "activities.providers.aws:AwsProvider",
    "gcp": "activities.providers.gcp:GcpProvider",
    "azure": "activities.providers.azure:AzureProvider",
    "digitalocean": "activities.providers.digitalocean:DigitalOceanProvider",
    "ovh": "activities.providers.ovh:OvhProvider",
    "hetzner": "activities.providers.hetzner:HetznerProvider",
    "scaleway": "activities.providers.scaleway:ScalewayProvider",
    "plugin": "activities.providers.plugin:PluginProvider",
    "proxmox": "activities.providers.proxmox:ProxmoxProvider",
    "redfish": "activities.providers.redfish:RedfishProvider",
}


def provider_class(name: str) -> type[Provider]:
    try:
        target = _PROVIDER_CLASSES[name]
    except KeyError:
        raise KeyError(f"no provider module for {name!r}") from None
    module_name, class_name = target.split(":")
    cls: type[Provider] = getattr(importlib.import_module(module_name), class_name)
    return cls


def supported_providers() -> list[str]:
    return sorted(_PROVIDER_CLASSES)
