// tok_regex.h — the regular expressions of tokenizer.json files, run by PCRE2
// (UTF, UCP, JIT) with the semantics of the engines Hugging Face tokenizers
// uses: Oniguruma for Split and Replace patterns (translated here: its \s, \w,
// \d, \h, \b, (?m), {,n}, \uHHHH and script properties mean other things in
// PCRE2), and its find_iter rule for empty matches.
#ifndef RLPIPE_TOK_REGEX_H
#define RLPIPE_TOK_REGEX_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

// The regex crate's \w (Rust's, which tokenizers uses for added tokens'
// single_word and the Whitespace pre-tokenizer: Alphabetic, M, Nd, Pc,
// Join_Control of Unicode 16) as the inside of a PCRE2 class: PCRE2's
// properties (Unicode 14) and the word characters Unicode 15.0 and 16.0
// added, measured against tokenizers over every code point.
#define TOK_RUST_WORD \
    "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}" \
    "\\x{897}\\x{CF3}\\x{ECE}\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CD}\\x{A7DA}-\\x{A7DC}" \
    "\\x{105C0}-\\x{105F3}\\x{10D40}-\\x{10D65}\\x{10D69}-\\x{10D6D}\\x{10D6F}-\\x{10D85}" \
    "\\x{10EC2}-\\x{10EC4}\\x{10EFC}-\\x{10EFF}\\x{1123F}-\\x{11241}\\x{11380}-\\x{11389}" \
    "\\x{1138B}\\x{1138E}\\x{11390}-\\x{113B5}\\x{113B7}-\\x{113C0}\\x{113C2}\\x{113C5}" \
    "\\x{113C7}-\\x{113CA}\\x{113CC}-\\x{113D3}\\x{113E1}-\\x{113E2}\\x{116D0}-\\x{116E3}" \
    "\\x{11BC0}-\\x{11BE0}\\x{11BF0}-\\x{11BF9}\\x{11F00}-\\x{11F10}\\x{11F12}-\\x{11F3A}" \
    "\\x{11F3E}-\\x{11F42}\\x{11F50}-\\x{11F5A}\\x{1342F}\\x{13440}-\\x{13455}" \
    "\\x{13460}-\\x{143FA}\\x{16100}-\\x{16139}\\x{16D40}-\\x{16D6C}\\x{16D70}-\\x{16D79}" \
    "\\x{18CFF}\\x{1B132}\\x{1B155}\\x{1CCF0}-\\x{1CCF9}\\x{1DF25}-\\x{1DF2A}" \
    "\\x{1E030}-\\x{1E06D}\\x{1E08F}\\x{1E4D0}-\\x{1E4F9}\\x{1E5D0}-\\x{1E5FA}\\x{2B739}" \
    "\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}"

typedef struct tok_re tok_re;

// Compiles an Oniguruma pattern (as tokenizers' Regex patterns are written).
// NULL, with why filled ("\\X is not supported", PCRE2's message...), when
// the pattern uses a construct whose meaning would differ or PCRE2 refuses it.
tok_re *tok_re_onig(const char *pattern, size_t len, char *why, size_t why_size);
// Compiles a pattern written for PCRE2 itself (the fixed patterns of the
// tokenizer code); a failure is a programming error and aborts.
tok_re *tok_re_pcre2(const char *pattern);
// A literal string (tokenizers' String patterns): plain substring search.
tok_re *tok_re_literal(const char *s, size_t len);
void tok_re_free(tok_re *re);

// Per-thread match state (PCRE2 match data); one per call, any pattern.
typedef struct tok_re_scratch tok_re_scratch;
tok_re_scratch *tok_re_scratch_new(void);
void tok_re_scratch_free(tok_re_scratch *s);

// The matches of re in s[0..n), s valid UTF-8, in order and non-overlapping,
// as tokenizers' find_iter gives them: after a match ending at e, the search
// restarts at e, and an empty match at the end of the previous match is
// skipped (the search moves one character on). Each match is appended to
// m as a (start, end) pair of byte offsets. 0, or -1 with err set when PCRE2
// fails (its match limit).
typedef struct {
    size_t *at;  // 2 per match: start, end
    size_t n, cap;
} tok_matches;
int tok_re_find_all(const tok_re *re, tok_re_scratch *sc, const uint8_t *s, size_t n, tok_matches *m,
                    rl_err *err);
// 1 if re matches s[0..n) from its start to its end (anchored at both ends).
int tok_re_whole(const tok_re *re, tok_re_scratch *sc, const uint8_t *s, size_t n);

#endif
