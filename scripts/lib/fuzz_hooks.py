"""schemathesis hooks for scripts/fuzz (loaded through SCHEMATHESIS_HOOKS): request bodies of media types it cannot
generate on its own. A tus PATCH (application/offset+octet-stream, openapi.yaml) carries raw bytes."""
import schemathesis
from hypothesis import strategies as st

schemathesis.openapi.media_type("application/offset+octet-stream", st.binary(max_size=4096))
