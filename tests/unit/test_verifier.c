// Unit tests of lib/sample/verifier.c: the built-in reward functions exact,
// number and boxed, and the number and \boxed{} readers under them. This file
// is also built with AddressSanitizer + UBSan.
#include <string.h>

#include "check.h"
#include "sample/verifier.h"

// ---- helpers ---------------------------------------------------------------

static double score(vf_kind k, const char *completion, const char *answer) {
    return vf_score(k, completion, strlen(completion), answer, strlen(answer));
}

// vf_last_number of a C string into out (64 bytes); its return value.
static int last_number(const char *s, char out[64]) {
    out[0] = 0;
    return vf_last_number(s, strlen(s), out, 64);
}

// A table of completions and the normalised last number each holds ("" none).
typedef struct {
    const char *text, *want;
} number_case;

// Returns the index of the first case that reads otherwise, or -1; got holds what it read.
static int first_wrong_number(const number_case *c, size_t n, char got[64]) {
    for (size_t i = 0; i < n; i++) {
        int len = last_number(c[i].text, got);
        if (len != (int)strlen(c[i].want) || strcmp(got, c[i].want)) return (int)i;
    }
    return -1;
}

#define CHECK_NUMBERS(cases)                                                                          \
    do {                                                                                              \
        char got[64];                                                                                 \
        int bad = first_wrong_number(cases, sizeof cases / sizeof *cases, got);                      \
        CHECK(bad < 0, "'%s' reads as '%s', not '%s'", cases[bad].text, got, cases[bad].want);         \
    } while (0)

// ---- names -----------------------------------------------------------------

static void parse_knows_exact_number_boxed_and_nothing_else(void) {
    vf_kind k = VF_EXACT;
    CHECK(vf_parse("number", &k) == 0 && k == VF_NUMBER, "number");
    CHECK(vf_parse("boxed", &k) == 0 && k == VF_BOXED, "boxed");
    CHECK(vf_parse("exact", &k) == 0 && k == VF_EXACT, "exact");
    CHECK(vf_parse("Exact", &k) == -1 && vf_parse("", &k) == -1 && vf_parse("numbers", &k) == -1,
          "a near name is accepted");
    CHECK(k == VF_EXACT, "a refused name changed *k");
    CHECK(!strcmp(vf_name(VF_NUMBER), "number") && !strcmp(vf_name(VF_BOXED), "boxed") &&
              !strcmp(vf_name(VF_EXACT), "exact"),
          "vf_name");
}

// ---- vf_last_number ---------------------------------------------------------

static void a_minus_is_a_sign_unless_it_follows_a_letter_digit_dot_or_underscore(void) {
    static const number_case cases[] = {
        {"x = -3", "-3"}, {"-3", "-3"},   {"5-3", "3"},      {"x-3", "3"},  {"a_-3", "3"},
        {"1.-3", "3"},    {"(-3)", "-3"}, {"=-12.5", "-12.5"}, {"--3", "-3"}, {"- 3", "3"},
        {"-x", ""},
    };
    CHECK_NUMBERS(cases);
}

static void commas_join_only_groups_of_exactly_three_digits(void) {
    static const number_case cases[] = {
        {"1,234,567", "1234567"}, {"1,2,3", "3"},         {"1,2345", "2345"},    {"12,345.5", "12345.5"},
        {"1,234, 5", "5"},        {"1,23", "23"},         {"1,234,", "1234"},    {"-1,000", "-1000"},
        {"0,001", "1"},           {"1,000,000.00", "1000000"},
    };
    CHECK_NUMBERS(cases);
}

static void fractions_drop_trailing_zeros_and_a_bare_dot_is_not_one(void) {
    static const number_case cases[] = {
        {"3.50", "3.5"}, {"3.", "3"},     {"3.0", "3"},     {"0.1", "0.1"},   {".5", "5"},
        {"1.2.3", "3"},  {"2.000", "2"},  {"x 0.10 y", "0.1"}, {"-0.5", "-0.5"},
    };
    CHECK_NUMBERS(cases);
}

static void leading_zeros_go_and_minus_zero_is_zero(void) {
    static const number_case cases[] = {
        {"007", "7"}, {"000", "0"}, {"-0", "0"}, {"-0.000", "0"}, {"-00.50", "-0.5"}, {"0", "0"},
    };
    CHECK_NUMBERS(cases);
}

static void the_last_number_is_taken_and_trailing_punctuation_is_not_part_of_it(void) {
    static const number_case cases[] = {
        {"The answer is 42.", "42"},  {"3 apples and 5 pears", "5"}, {"42!", "42"},
        {"so x=7,", "7"},              {"7\n\n", "7"},                {"1e-5", "5"},
        {"caf\xc3\xa9 12", "12"},
    };
    CHECK_NUMBERS(cases);
}

static void no_number_reads_as_zero_length(void) {
    static const number_case cases[] = {{"", ""}, {"no digits here", ""}, {"-", ""}, {",.", ""}};
    CHECK_NUMBERS(cases);
}

static void a_number_longer_than_the_buffer_is_minus_one(void) {
    char out[4];
    CHECK(vf_last_number("123", 3, out, 4) == 3 && !strcmp(out, "123"), "'123' in 4 bytes: '%s'", out);
    CHECK(vf_last_number("1234", 4, out, 4) == -1, "'1234' fits 4 bytes with its NUL");
    CHECK(vf_last_number("-0.5", 4, out, 4) == -1, "'-0.5' fits 4 bytes with its NUL");
    CHECK(vf_last_number("-0", 2, out, 2) == 1 && !strcmp(out, "0"), "'-0' in 2 bytes: '%s'", out);
}

static void only_n_bytes_are_read(void) {
    char out[64];
    CHECK(vf_last_number("12345", 3, out, sizeof out) == 3 && !strcmp(out, "123"), "got '%s'", out);
    CHECK(vf_last_number("1,234", 4, out, sizeof out) == 2 && !strcmp(out, "23"), "got '%s'", out);
    CHECK(vf_last_number("-3", 1, out, sizeof out) == 0, "'-' alone is a number");
}

// ---- vf_last_boxed ----------------------------------------------------------

static void boxed_takes_the_last_box_with_nested_braces_balanced(void) {
    static const struct {
        const char *text;
        int found;
        const char *want;
    } cases[] = {
        {"so \\boxed{\\frac{1}{2}}.", 1, "\\frac{1}{2}"},
        {"\\boxed{1} then \\boxed{2}", 1, "2"},
        {"\\boxed{}", 1, ""},
        {"\\boxed{ 7 }", 1, " 7 "},
        {"\\boxed{\\{1,2\\}}", 1, "\\{1,2\\}"},
        {"\\boxed{a\\\\}", 1, "a\\\\"},
        {"\\boxed{\\boxed{3}}", 1, "3"},
        {"\\boxed{1} and \\boxed{2", 0, ""},
        {"\\boxed{{1}", 0, ""},
        {"\\boxed{1\\}", 0, ""},
        {"\\boxed 5", 0, ""},
        {"boxed{5}", 0, ""},
        {"", 0, ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *b = NULL;
        size_t n = 0;
        int found = vf_last_boxed(cases[i].text, strlen(cases[i].text), &b, &n);
        CHECK(found == cases[i].found, "'%s': found %d", cases[i].text, found);
        if (found)
            CHECK(n == strlen(cases[i].want) && !memcmp(b, cases[i].want, n), "'%s' holds '%.*s', not '%s'",
                  cases[i].text, (int)n, b, cases[i].want);
    }
}

// ---- vf_score ---------------------------------------------------------------

static void exact_compares_bytes_trimmed_of_white_space(void) {
    CHECK(score(VF_EXACT, "  Paris\n\n", "Paris") == 1.0, "surrounding white space counted");
    CHECK(score(VF_EXACT, "Paris", "\tParis \r\n") == 1.0, "the answer was not trimmed");
    CHECK(score(VF_EXACT, "paris", "Paris") == 0.0, "case-insensitive");
    CHECK(score(VF_EXACT, "Par is", "Paris") == 0.0, "inner white space ignored");
    CHECK(score(VF_EXACT, " \n", "") == 1.0, "a blank completion differs from the empty answer");
    CHECK(score(VF_EXACT, "Paris.", "Paris") == 0.0, "punctuation ignored");
}

static void number_compares_the_last_number_with_the_answer_as_decimals(void) {
    CHECK(score(VF_NUMBER, "1 + 2 = 3.50", "3.5") == 1.0, "3.50 differs from 3.5");
    CHECK(score(VF_NUMBER, "The answer is 42.", "42") == 1.0, "a trailing period spoils 42");
    CHECK(score(VF_NUMBER, "The answer is 1,234,567", "1234567") == 1.0, "commas in the completion not joined");
    CHECK(score(VF_NUMBER, "1234567", " 1,234,567\n") == 1.0, "commas in the answer not joined");
    CHECK(score(VF_NUMBER, "x = -0", "0") == 1.0, "-0 differs from 0");
    CHECK(score(VF_NUMBER, "x = -3", "-3") == 1.0, "-3 read without its sign");
    CHECK(score(VF_NUMBER, "5-3", "-3") == 0.0, "5-3 holds -3");
    CHECK(score(VF_NUMBER, "42 or 41", "42") == 0.0, "not the last number");
    CHECK(score(VF_NUMBER, "no number", "0") == 0.0, "no number scores");
    CHECK(score(VF_NUMBER, "007", "7.000") == 1.0, "leading and trailing zeros kept");
    CHECK(score(VF_NUMBER, "3.", "3") == 1.0, "'3.' does not read as 3");
    CHECK(score(VF_NUMBER, "3.05", "3.5") == 0.0, "3.05 = 3.5");
    CHECK(score(VF_NUMBER, "42", "abc") == 0.0, "a non-numeric answer scores");
}

static void number_compares_more_than_20_digits_exactly(void) {
    // 2^64 + 1 and its neighbours: equal as doubles, different as decimals.
    CHECK(score(VF_NUMBER, "= 18446744073709551617", "18446744073709551617") == 1.0, "2^64+1 differs from itself");
    CHECK(score(VF_NUMBER, "= 18446744073709551617", "18446744073709551616") == 0.0, "2^64+1 = 2^64");
    CHECK(score(VF_NUMBER, "1234567890123456789012345", "1,234,567,890,123,456,789,012,345") == 1.0,
          "25 digits with commas differ from the same without");
    CHECK(score(VF_NUMBER, "0.1000000000000000000000001", "0.1") == 0.0, "a 25th decimal ignored");
    char out[64];
    CHECK(last_number("product: 000123456789012345678901234567890.500", out) == 32 &&
              !strcmp(out, "123456789012345678901234567890.5"),
          "got '%s'", out);
}

static void boxed_compares_the_last_box_trimmed_with_the_answer(void) {
    CHECK(score(VF_BOXED, "so \\boxed{\\frac{1}{2}}", "\\frac{1}{2}") == 1.0, "nested braces cut the box short");
    CHECK(score(VF_BOXED, "\\boxed{1} no, \\boxed{ 2 }", "2") == 1.0, "not the last box, or not trimmed");
    CHECK(score(VF_BOXED, "\\boxed{2} and \\boxed{2", "2") == 0.0, "an unclosed last box read as closed");
    CHECK(score(VF_BOXED, "2", "2") == 0.0, "no box scores");
    CHECK(score(VF_BOXED, "\\boxed{}", "") == 1.0, "an empty box differs from the empty answer");
    CHECK(score(VF_BOXED, "\\boxed{2.0}", "2") == 0.0, "boxed compared 2.0 and 2 as numbers");
}

// ---- vf_check_answer --------------------------------------------------------

static void check_answer_needs_exactly_one_number_for_number(void) {
    static const char *good[] = {"42", " -3\n", "1,234,567", "3.50", "-0", "007",
                                 "123456789012345678901234567890"};
    static const char *bad[] = {"abc", "", "  ", "1 2", "3.", "+3", "1e5", "1,2345", ".5", "x=3", "3 apples",
                                "-", "5-3"};
    rl_err e;
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        CHECK(vf_check_answer(VF_NUMBER, good[i], strlen(good[i]), &e) == 0, "'%s' refused: %s", good[i], e.msg);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        e.msg[0] = 0;
        CHECK(vf_check_answer(VF_NUMBER, bad[i], strlen(bad[i]), &e) == -1, "'%s' accepted", bad[i]);
        CHECK(strstr(e.msg, "is not a number, which --verifier number needs"), "'%s': %s", bad[i], e.msg);
    }
    CHECK(vf_check_answer(VF_NUMBER, "abc", 3, &e) == -1 &&
              !strcmp(e.msg, "answer 'abc' is not a number, which --verifier number needs"),
          "message: %s", e.msg);
}

static void check_answer_quotes_at_most_80_bytes_of_a_long_answer(void) {
    char answer[200];
    memset(answer, 'x', sizeof answer);
    rl_err e;
    CHECK(vf_check_answer(VF_NUMBER, answer, sizeof answer, &e) == -1, "accepted");
    CHECK(strlen(e.msg) < 80 + 64 && strstr(e.msg, "xxx...' is not"), "message: %s", e.msg);
}

static void check_answer_accepts_anything_for_exact_and_boxed(void) {
    rl_err e;
    CHECK(vf_check_answer(VF_EXACT, "abc", 3, &e) == 0, "exact refused abc");
    CHECK(vf_check_answer(VF_EXACT, "", 0, &e) == 0, "exact refused the empty answer");
    CHECK(vf_check_answer(VF_BOXED, "\\frac{1}{2}", 11, &e) == 0, "boxed refused a fraction");
    CHECK(vf_check_answer(VF_BOXED, "}{", 2, &e) == 0, "boxed refused unbalanced braces");
}

int main(void) {
    RUN(parse_knows_exact_number_boxed_and_nothing_else);
    RUN(a_minus_is_a_sign_unless_it_follows_a_letter_digit_dot_or_underscore);
    RUN(commas_join_only_groups_of_exactly_three_digits);
    RUN(fractions_drop_trailing_zeros_and_a_bare_dot_is_not_one);
    RUN(leading_zeros_go_and_minus_zero_is_zero);
    RUN(the_last_number_is_taken_and_trailing_punctuation_is_not_part_of_it);
    RUN(no_number_reads_as_zero_length);
    RUN(a_number_longer_than_the_buffer_is_minus_one);
    RUN(only_n_bytes_are_read);
    RUN(boxed_takes_the_last_box_with_nested_braces_balanced);
    RUN(exact_compares_bytes_trimmed_of_white_space);
    RUN(number_compares_the_last_number_with_the_answer_as_decimals);
    RUN(number_compares_more_than_20_digits_exactly);
    RUN(boxed_compares_the_last_box_trimmed_with_the_answer);
    RUN(check_answer_needs_exactly_one_number_for_number);
    RUN(check_answer_quotes_at_most_80_bytes_of_a_long_answer);
    RUN(check_answer_accepts_anything_for_exact_and_boxed);
    CHECK_DONE();
}
