// verifier.h — the built-in reward functions of rl-sample (exact,
// number, boxed). Each compares a completion's text with a prompt's reference
// answer and gives 1.0 (correct) or 0.0.
//
//   exact   the completion, trimmed of white space (space, \t, \n, \v, \f,
//           \r) at both ends, equals the answer trimmed the same way (bytes,
//           case-sensitive);
//   number  the last number in the completion equals the answer as a number
//           (see vf_last_number): "1,234" = "1234", "3.50" = "3.5",
//           "-0" = "0"; compared exactly as decimals, never through a double,
//           so 25-digit products compare right;
//   boxed   the content of the last \boxed{...} (braces nested inside it
//           balanced) trimmed, equals the answer trimmed; "\boxed{}" is empty.
#ifndef RLPIPE_VERIFIER_H
#define RLPIPE_VERIFIER_H

#include <stddef.h>

#include "util.h"

typedef enum { VF_EXACT, VF_NUMBER, VF_BOXED } vf_kind;

// "exact", "number", "boxed" -> 0 and *k; anything else -1.
int vf_parse(const char *name, vf_kind *k);
const char *vf_name(vf_kind k);

// Whether answer[0..n) can be verified by k: for number, the trimmed answer
// must be exactly one number as vf_last_number reads them. 0, or -1 with err
// ("answer 'abc' is not a number, which --verifier number needs").
int vf_check_answer(vf_kind k, const char *answer, size_t n, rl_err *err);

// 1.0 if the completion matches the answer under k, else 0.0.
double vf_score(vf_kind k, const char *completion, size_t n, const char *answer, size_t na);

// The last number in s[0..n), normalised into out (NUL-terminated): optional
// "-", the integer digits without leading zeros (at least "0"), and "." plus
// the fraction digits without trailing zeros when any remain; "-0" becomes
// "0". A number is: an optional '-' (a sign only when the character before
// it is not an ASCII letter, digit, '.' or '_', so "5-3" holds 5 and 3),
// digits with optional thousands groups (',' followed by exactly three
// digits and then no digit: "1,234,567"), and an optional fraction ('.'
// followed by at least one digit; "3." is 3). Returns the length written, 0
// when s holds no number, -1 when out (size bytes) is too small.
int vf_last_number(const char *s, size_t n, char *out, size_t size);

// The content of the last "\boxed{" ... matching "}" in s[0..n): *b and *bn
// point into s. 1 found, 0 none (or the last one is never closed). Inside,
// a backslash takes the next character with it: \{ and \} are literal braces
// that do not count, and \\ does not escape the brace after it.
int vf_last_boxed(const char *s, size_t n, const char **b, size_t *bn);

#endif
