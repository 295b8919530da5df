// UTF-8 decoding and encoding (see unicode.h for the leniency rules).
#include "model/unicode.h"

size_t st_utf8_seq_len(uint8_t lead)
{
    static const uint8_t len_by_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len_by_nibble[lead >> 4];
}

static int is_cont(const char *s, size_t n, size_t i)
{
    return i < n && ((uint8_t)s[i] & 0xC0) == 0x80;
}

uint32_t st_utf8_decode(const char *s, size_t n, size_t *i)
{
    size_t p = *i;
    uint8_t b0 = (uint8_t)s[p];
    if (b0 < 0x80) {
        *i = p + 1;
        return b0;
    }
    if ((b0 & 0xE0) == 0xC0 && is_cont(s, n, p + 1)) {
        *i = p + 2;
        return ((uint32_t)(b0 & 0x1F) << 6) | ((uint8_t)s[p + 1] & 0x3F);
    }
    if ((b0 & 0xF0) == 0xE0 && is_cont(s, n, p + 1) && is_cont(s, n, p + 2)) {
        *i = p + 3;
        return ((uint32_t)(b0 & 0x0F) << 12) | ((uint32_t)((uint8_t)s[p + 1] & 0x3F) << 6) |
               ((uint8_t)s[p + 2] & 0x3F);
    }
    if ((b0 & 0xF8) == 0xF0 && is_cont(s, n, p + 1) && is_cont(s, n, p + 2) && is_cont(s, n, p + 3)) {
        *i = p + 4;
        return ((uint32_t)(b0 & 0x07) << 18) | ((uint32_t)((uint8_t)s[p + 1] & 0x3F) << 12) |
               ((uint32_t)((uint8_t)s[p + 2] & 0x3F) << 6) | ((uint8_t)s[p + 3] & 0x3F);
    }
    *i = p + 1;
    return ST_UTF8_REPLACEMENT;
}

size_t st_utf8_encode(uint32_t cp, char *out)
{
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) cp = ST_UTF8_REPLACEMENT;
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}
