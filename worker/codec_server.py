"""A Temporal codec server for `LargePayloadCodec`: the Web UI (`TEMPORAL_CODEC_ENDPOINT`,
or the dev server's `--ui-codec-endpoint`) and `temporal workflow show --codec-endpoint`
show a compressed payload (a pool's state past ~700 claims, a burst's demand) as the JSON
it carries instead of `binary/zlib`.

The protocol (Temporal's samples-go `codec-server/protocol.md`): POST `.../decode` or
`.../encode` with a `Payloads` message as protobuf JSON, answered the same way; only the
last part of the path counts, so the server may sit under any prefix. The browser calls it
from the UI's origin, so those origins (`cors_origins`) get CORS answers. Nothing here is
secret — anyone can inflate zlib — so there is no authentication to configure.
"""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import hdrs, web
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payload, Payloads

from worker.payload_codec import LargePayloadCodec, PayloadTooLarge

# What one request may carry: a compressed payload stands for up to Temporal's 2 MB limit
# many times over; base64 in JSON adds a third.
MAX_REQUEST_BYTES = 16 * 2**20
# What one request's payloads may inflate to, together: the largest we write is a pool's
# state (~700 bytes a claim: 10,000 claims ~7 MB); zlib inflates 1,000-fold, a DoS.
MAX_DECODED_BYTES = 64 * 2**20

_Transform = Callable[[Sequence[Payload]], Awaitable[list[Payload]]]


def codec_app(cors_origins: Sequence[str] = ()) -> web.Application:
    codec = LargePayloadCodec(max_decoded_bytes=MAX_DECODED_BYTES)
    allowed = set(cors_origins)

    def cors(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
        origin = request.headers.get(hdrs.ORIGIN)
        if origin in allowed:
            response.headers[hdrs.ACCESS_CONTROL_ALLOW_ORIGIN] = origin
            response.headers[hdrs.ACCESS_CONTROL_ALLOW_METHODS] = "POST"
            # The UI sends the namespace, and its login's token when told to include them.
            response.headers[hdrs.ACCESS_CONTROL_ALLOW_HEADERS] = (
                "content-type,x-namespace,authorization"
            )
            response.headers[hdrs.ACCESS_CONTROL_ALLOW_CREDENTIALS] = "true"
            response.headers[hdrs.VARY] = "Origin"
        return response

    async def preflight(request: web.Request) -> web.StreamResponse:
        return cors(request, web.Response())

    async def transform(request: web.Request) -> web.StreamResponse:
        action = request.path.rstrip("/").rsplit("/", 1)[-1]
        apply: _Transform | None = {"decode": codec.decode, "encode": codec.encode}.get(action)
        if apply is None:
            return cors(
                request, web.json_response({"error": "POST .../decode or .../encode"}, status=404)
            )
        try:
            payloads = json_format.Parse(await request.text(), Payloads())
        except (json_format.ParseError, UnicodeDecodeError) as err:
            return cors(
                request, web.json_response({"error": f"not a Payloads message: {err}"}, status=400)
            )
        try:
            answer = await apply(payloads.payloads)
        except (zlib.error, DecodeError, PayloadTooLarge) as err:  # cannot be shown
            return cors(
                request, web.json_response({"error": f"cannot {action}: {err}"}, status=400)
            )
        # `Payloads` as protobuf JSON, with `"payloads": []` for none (clients read the list).
        body = {"payloads": [json_format.MessageToDict(payload) for payload in answer]}
        return cors(request, web.json_response(body))

    async def healthy(request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok")

    app = web.Application(client_max_size=MAX_REQUEST_BYTES)
    # Its Deployment's probes (deploy/components/codec-server), as the worker's and trigger's.
    app.router.add_get("/healthz", healthy)
    app.router.add_get("/readyz", healthy)
    app.router.add_route(hdrs.METH_OPTIONS, "/{tail:.*}", preflight)
    app.router.add_route(hdrs.METH_POST, "/{tail:.*}", transform)
    return app
