// tok_unicode.c — UTF-8 and the Unicode predicates of tokenizer.json's stages.
#include "tokenizer/tok_unicode.h"

#include <utf8proc.h>

size_t tok_utf8_next(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t c = s[0];
    size_t len = c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (len > n) len = 1;  // cut short (only in bytes that are not UTF-8): one byte
    static const uint8_t lead_mask[5] = {0, 0xFF, 0x1F, 0x0F, 0x07};
    uint32_t v = c & lead_mask[len];
    for (size_t i = 1; i < len; i++) v = v << 6 | (s[i] & 0x3F);
    *cp = v;
    return len;
}

size_t tok_utf8_put(uint32_t cp, uint8_t out[4]) {
    return (size_t)utf8proc_encode_char((utf8proc_int32_t)cp, out);
}

int tok_in_ranges(uint32_t cp, const uint32_t (*r)[2], size_t n) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid][0]) hi = mid;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

int tok_is_white_space(uint32_t cp) {
    // PropList.txt's White_Space, unchanged since Unicode 6.3.
    if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}
