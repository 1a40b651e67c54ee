"""The typed search attributes operators filter claims by in the Web UI and CLI."""

from temporalio.common import SearchAttributeKey

NODE_POOL = SearchAttributeKey.for_keyword("CloudburstNodePool")
PROVIDER = SearchAttributeKey.for_keyword("CloudburstProvider")
REGION = SearchAttributeKey.for_keyword("CloudburstRegion")
INSTANCE_TYPE = SearchAttributeKey.for_keyword("CloudburstInstanceType")
PHASE = SearchAttributeKey.for_keyword("CloudburstPhase")
NODE_NAME = SearchAttributeKey.for_keyword("CloudburstNodeName")

ALL = (NODE_POOL, PROVIDER, REGION, INSTANCE_TYPE, PHASE, NODE_NAME)
