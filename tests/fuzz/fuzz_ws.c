/* fuzz_ws - libFuzzer target for the WebSocket layer (src/http/ws.c): the
 * frames a client sends an attached terminal, and the handshake headers the
 * auth code reads (the subprotocol list, the key). Build and run with
 * scripts/fuzz.sh. */
#include "http/ws.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        /* The headers, as NUL-terminated strings. */
        char *s = malloc(size + 1);
        memcpy(s, data, size);
        s[size] = 0;
        char *auth = ws_auth_from_protocols("websocket", s);
        free(auth);
        (void)ws_key_valid(s);
        (void)ws_offers(s, WS_PROTOCOL);
        free(s);

        /* The frames, in two pieces so partial frames are exercised too. */
        ws_conn c;
        ws_init(&c, -1, 4096);
        size_t half = size / 2;
        ws_feed(&c, data, half);
        ws_msg m;
        uint16_t code;
        int k;
        while ((k = ws_next(&c, &m, &code)) > 0)
                ;
        if (k == 0) {
                ws_feed(&c, data + half, size - half);
                while (ws_next(&c, &m, &code) > 0)
                        ;
        }
        ws_free(&c);
        return 0;
}
