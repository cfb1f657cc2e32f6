// jinja_case.h — Python's str case methods, which jinja2's filters call:
// full mappings (SpecialCasing: "ß".upper() is "SS", "ﬁ".upper() "FI"),
// the final sigma of lower(), and Python's cased, uppercase and lowercase
// code points, from the tables scripts/unicode_case.py takes from Python.
// s[0..n) is UTF-8; each appends the result to b.
#ifndef RLPIPE_JINJA_CASE_H
#define RLPIPE_JINJA_CASE_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

void jx_case_upper(sbuf *b, const char *s, size_t n);        // str.upper
void jx_case_lower(sbuf *b, const char *s, size_t n);        // str.lower: Σ is ς where a word ends
void jx_case_title(sbuf *b, const char *s, size_t n);        // str.title
void jx_case_capitalize(sbuf *b, const char *s, size_t n);   // str.capitalize (Python 3.8 on: the first titlecased)
void jx_case_swapcase(sbuf *b, const char *s, size_t n);     // str.swapcase
int jx_is_cased(uint32_t cp);
int jx_is_upper(uint32_t cp);   // str.isupper of the one code point
int jx_is_lower(uint32_t cp);   // str.islower of the one code point

#endif
