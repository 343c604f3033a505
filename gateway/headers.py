"""The response headers that explain a routing decision (see the README)."""

H_TIER = "x-gateway-tier"
H_ROUTE = "x-gateway-route"
H_FALLBACK = "x-gateway-fallback"  # also a trailing SSE comment once a stream's headers are gone
H_OVERHEAD = "x-gateway-overhead-ms"
H_REQUEST_ID = "x-request-id"
H_BACKOFF = "x-gateway-backoff-ms"  # deliberate waits before retrying a tier (not overhead)
H_CHECKS_FAILED = "x-gateway-checks-failed"  # the last tier's answer failed this check
H_SHOULD_RETRY = "x-should-retry"  # "false" once every tier was tried (the openai SDKs obey it)
H_COST = "x-gateway-cost-usd"  # the answer's price (streams: a trailing SSE comment)
H_HEDGE = "x-gateway-hedge"  # a hedge fired: which tier started beside the first, which won
H_QUEUE = "x-gateway-queue-ms"  # time waited in the gateway's queue for a free engine slot
H_CONTINUED = "x-gateway-continued"  # non-streamed: "<tier>:<chars>" of the answer came from it
H_CACHE = "x-gateway-cache"  # hit | miss | bypass: the response cache's part (gateway.cache)
H_CACHE_MATCH = "x-gateway-cache-match"  # a hit: exact | semantic 0.953 | coalesced
H_AGE = "age"  # a hit: seconds since the answer was stored (RFC 9111)
H_FINISH = "x-gateway-finish"  # streams: how a break after the first byte would be finished
H_RETRY_AFTER = "retry-after"  # a 429 / 503: seconds to wait before trying again
# a tenant's rate limits (as OpenAI names them)
H_LIMIT_REQUESTS = "x-ratelimit-limit-requests"
H_REMAINING_REQUESTS = "x-ratelimit-remaining-requests"
H_RESET_REQUESTS = "x-ratelimit-reset-requests"
H_LIMIT_TOKENS = "x-ratelimit-limit-tokens"
H_REMAINING_TOKENS = "x-ratelimit-remaining-tokens"


def all_headers() -> tuple[str, ...]:
    """Every header above (what CORS exposes to a browser's script)."""
    return tuple(v for k, v in globals().items() if k.startswith("H_") and isinstance(v, str))
