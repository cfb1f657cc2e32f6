"""Texts on which tokenizers are compared (tests/py/test_tokenizers_hf.py) and
timed (bench/tokenize.sh): a deterministic generator, the same strings for the
same seed, built from nothing but Python's random module.

Every kind of text that tokenizer.json files treat differently has a share:
English prose, code (Python, C, JSON, indented with spaces and tabs), digit
runs and numbers with separators, whitespace runs (spaces, tabs, LF, CRLF, CR
alone, NBSP, U+3000 and the other Unicode spaces), Chinese, Japanese, Korean,
Arabic, Hindi with its combining signs, emoji (skin tones, ZWJ sequences,
flags, keycaps), combining marks and forms that NFC or NFKC change, English
contractions in any case (for the (?i:'s|'t|...) alternatives), a file's
added tokens inside and around text, random code points of every plane, and
mixtures of these. Lengths run from empty and one character up to long texts
of LONG_CHARS characters.

  texts(n, seed, specials=())  n strings; specials are the added tokens of the
                               file under test, put inside and around text
  prose_lines(n, seed)         plain lines (prose, code, numbers, scripts) to
                               train a small BPE vocabulary on
"""
import json
import random

LONG_CHARS = 10000

WORDS = ("the of and to in is was for that with as on by at from it this be are an or which not but had have "
         "has were one all their there been if more when will would who so no time people year way day man "
         "world life hand part child eye woman place work week case point government company number group "
         "problem fact model token learning reward policy gradient sampler weight batch layer attention "
         "Paris London Tokyo Alice Bob GPU CPU HTTP JSON URL NASA iPhone McDonald O'Brien naïve café résumé "
         "coöperate façade jalapeño Zürich São Paulo").split()
CONTRACTIONS = ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d")
SENTENCE_ENDS = (".", ".", ".", "!", "?", "...", ":", ";", "", "\u2026")
PUNCT = ",.;:!?\"'()[]{}<>-_/\\|@#$%^&*+=~`"

# Whitespace: ASCII, the Unicode spaces (Zs), line and paragraph separators,
# NEL, and the zero-width ones that are not whitespace for \s.
SPACES = (" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", "\r", "\r\r", "\x0b", "\x0c",
          "\u00a0", "\u1680", "\u2000", "\u2002", "\u2003", "\u2007", "\u2009", "\u200a", "\u202f", "\u205f",
          "\u3000", "\u2028", "\u2029", "\u0085", "\u200b", "\u200d", "\ufeff", " \n", "\n ", " \t\n", "\t \r\n ")

CJK_PHRASES = ("机器学习", "你好，世界！", "我们在北京。", "这是一个测试", "中华人民共和国", "人工智能的发展",
               "「引用」和《书名》", "第１２３条", "一二三四五六七八九十", "大语言模型（LLM）")
JAPANESE_PHRASES = ("こんにちは、世界。", "東京都渋谷区", "カタカナとひらがな", "ｶﾀｶﾅ半角", "私は学生です。",
                    "ありがとうございます！", "ー〜・", "令和５年")
KOREAN_PHRASES = ("안녕하세요", "한국어 텍스트", "대한민국 서울", "감사합니다.")
ARABIC_PHRASES = ("مرحبا بالعالم", "اللغة العربية", "السَّلَامُ عَلَيْكُمْ", "١٢٣٤٥٦٧٨٩٠", "۱۲۳ فارسی",
                  "نص مع English وأرقام 123")
HINDI_PHRASES = ("नमस्ते दुनिया", "हिन्दी भाषा", "क़ ख़ ग़ ज़", "क्षत्रिय", "१२३४५", "प्रधानमंत्री", "श्री")
OTHER_SCRIPTS = ("Привет, мир!", "Ελληνικά κείμενα", "עברית שלום", "ไทย ภาษา", "Tiếng Việt có dấu",
                 "Ἀθῆναι", "Straße ẞ ß", "İstanbul ıi", "ǅemal ǈ ǋ", "Ⅻ Ⅳ ⅷ", "𝐇𝐞𝐥𝐥𝐨 𝔘𝔫𝔦𝔠𝔬𝔡𝔢")

# Emoji: plain, with skin tones, ZWJ families and professions, flags (pairs
# of regional indicators, and a tag sequence), keycaps, variation selectors.
EMOJI = ("😀", "😂", "🤖", "❤", "❤️", "✨", "🚀", "👍", "👍🏻", "👍🏽", "👍🏿", "👋🏼", "👨\u200d👩\u200d👧\u200d👦",
         "👩\u200d💻", "👨🏾\u200d🚀", "🏳️\u200d🌈", "🧑\u200d🤝\u200d🧑", "🇫🇷", "🇯🇵", "🇺🇸🇬🇧", "🇦",
         "🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f", "1️⃣", "#️⃣", "*⃣", "☺︎", "☺️",
         "\U0001f9d1\U0001f3fd\u200d\U0001f9b0", "🫠", "🥲")

# Forms NFC or NFKC change: decomposed letters, several marks in a
# non-canonical order, Hangul jamo, singletons (Angstrom sign, Ohm sign, CJK
# compatibility ideographs), ligatures, full-width and other compatibility
# forms, and a mark with nothing to combine with.
NORMALIZATION = ("e\u0301", "Cafe\u0301", "a\u0308", "o\u0302\u0323", "o\u0323\u0302", "A\u030a", "\u212b",
                 "\u2126", "\u1100\u1161\u11a8", "\u1112\u1161\u11ab\u1100\u1173\u11af", "\uf900\uf901",
                 "\ufb01le", "\ufb02ow", "\ufb00", "ＡＢＣ１２３", "ｆｕｌｌ　ｗｉｄｔｈ", "x²", "H₂O", "½", "㎏",
                 "\u2460", "\u0301", "\u0300abc", "n\u0303", "\u00c5\u0301", "\u1e9b\u0323", "\u0958", "\u0b47\u0b3e",
                 "\u0344", "\u0f73", "\u1f80", "\u03d3", "ﷺ", "ﾊﾟ", "ᄀ",
                 # Marks and compatibility forms newer than tokenizers' normalisation
                 # tables (it keeps U+0898 before U+0316, and U+32FF as it is).
                 "a\u0898\u0316", "e\u0d3b\u0301", "x\U00011f41\u0301", "\u32ff", "\ua7f2", "\U0001fbf5")

PYTHON_NAMES = ("x", "i", "data", "result", "self", "value", "items", "config", "tokens", "batch_size", "lr")


def _pick(rng, seq):
    return seq[rng.randrange(len(seq))]


def _word(rng):
    w = _pick(rng, WORDS)
    r = rng.random()
    if r < 0.08:
        return w.upper()
    if r < 0.2:
        return w.capitalize()
    return w


def prose(rng):
    """English-like sentences with punctuation, quotes and contractions."""
    out = []
    for _ in range(rng.randrange(1, 5)):
        words = [_word(rng) for _ in range(rng.randrange(2, 18))]
        if rng.random() < 0.4:
            i = rng.randrange(len(words))
            words[i] += _pick(rng, CONTRACTIONS)
        if rng.random() < 0.2:
            i = rng.randrange(len(words))
            words[i] = "\"" + words[i] + "\""
        if rng.random() < 0.2:
            i = rng.randrange(len(words))
            words[i] += ","
        s = " ".join(words)
        out.append(s[0].upper() + s[1:] + _pick(rng, SENTENCE_ENDS))
    return _pick(rng, (" ", " ", "  ", "\n", "\n\n")).join(out)


def contractions(rng):
    """Contractions in every case, next to letters, digits, spaces and apostrophes."""
    out = []
    for _ in range(rng.randrange(1, 8)):
        c = _pick(rng, CONTRACTIONS)
        c = "".join(ch.upper() if rng.random() < 0.5 else ch for ch in c)
        if rng.random() < 0.15:
            c = c.replace("'", _pick(rng, ("\u2019", "''", "`")))
        before = _pick(rng, ("", "it", "IT", "we", "They", "O", " ", "1", "'", "x"))
        after = _pick(rng, ("", " ", "s", "S", "x", "d", "ll", ".", "\n", "'s"))
        out.append(before + c + after)
    return _pick(rng, ("", " ")).join(out)


def _py_code(rng):
    ind = _pick(rng, ("    ", "  ", "\t"))
    name = _pick(rng, PYTHON_NAMES)
    lines = [f"def f_{rng.randrange(100)}({name}, n={rng.randrange(1000)}):",
             f"{ind}\"\"\"Returns the {_word(rng)} of {name}.\"\"\"",
             f"{ind}for i in range(len({name})):",
             f"{ind}{ind}if {name}[i] >= {rng.randrange(-50, 50)} and not i % {rng.randrange(1, 9)}:",
             f"{ind}{ind}{ind}{name}[i] += {rng.random():.4f}  # {_word(rng)}",
             f"{ind}{ind}elif {name}[i] is None:",
             f"{ind}{ind}{ind}raise ValueError(f\"bad {{i}}: {{{name}[i]!r}}\")",
             "", f"{ind}return {{'{_word(rng)}': {name}, \"n\": n ** 2}}"]
    return "\n".join(lines[:rng.randrange(2, len(lines) + 1)])


def _c_code(rng):
    ind = _pick(rng, ("    ", "\t", "  "))
    n = rng.randrange(1, 4096)
    lines = ["#include <stdio.h>", "", f"static int g_{_word(rng).lower()}[{n}];", "",
             "int main(int argc, char **argv) {", f"{ind}for (int i = 0; i < argc; i++) {{",
             f"{ind}{ind}if (argv[i][0] == '-' && i != {rng.randrange(9)}) continue;",
             f"{ind}{ind}printf(\"%s\\t%d\\n\", argv[i], i << {rng.randrange(8)});", f"{ind}}}",
             f"{ind}return argc > 1 ? 0 : -1; /* {_word(rng)} */", "}"]
    return _pick(rng, ("\n", "\r\n")).join(lines[rng.randrange(3):])


def _json_code(rng):
    obj = {_word(rng): rng.randrange(-10 ** 6, 10 ** 6) for _ in range(rng.randrange(1, 4))}
    obj["list"] = [rng.random(), None, True, _word(rng), [1, 2, {"k": "v"}]]
    obj["nested"] = {"a": {"b": {"c": _pick(rng, CJK_PHRASES + EMOJI)}}}
    return json.dumps(obj, indent=_pick(rng, (2, 4, "\t", None)), ensure_ascii=rng.random() < 0.3)


def code(rng):
    return _pick(rng, (_py_code, _c_code, _json_code))(rng)


def numbers(rng):
    """Digit runs of every length (up to thousands) and numbers with separators."""
    if rng.random() < 0.02:                  # a digit run thousands long
        return str(rng.randrange(10 ** rng.randrange(500, 3000)))
    forms = (lambda: "".join(str(rng.randrange(10)) for _ in range(rng.randrange(1, 80))),
             lambda: f"{rng.randrange(10 ** 9):,}", lambda: f"{rng.randrange(10 ** 9):_}",
             lambda: f"{rng.randrange(10 ** 7):,}".replace(",", " "),
             lambda: f"{rng.randrange(10 ** 7):,}".replace(",", "\u202f"),
             lambda: f"{rng.uniform(-1e6, 1e6):.{rng.randrange(8)}f}", lambda: f"{rng.uniform(-1, 1):.3e}",
             lambda: f"{rng.randrange(1900, 2100)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}",
             lambda: f"{rng.randrange(24)}:{rng.randrange(60):02d}:{rng.randrange(60):02d}",
             lambda: f"+1 ({rng.randrange(100, 999)}) {rng.randrange(100, 999)}-{rng.randrange(1000, 9999)}",
             lambda: f"{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(256)}",
             lambda: f"${rng.randrange(10 ** 6)}.{rng.randrange(100):02d}", lambda: f"{rng.randrange(100)}%",
             lambda: f"v{rng.randrange(10)}.{rng.randrange(30)}.{rng.randrange(100)}",
             lambda: f"0x{rng.randrange(2 ** 32):08X}", lambda: "１２３４５" if rng.random() < 0.5 else "٣٤٥",
             lambda: str(rng.randrange(10 ** 40)) + "." + str(rng.randrange(10 ** 20)))
    sep = _pick(rng, (" ", ", ", "\n", "", " and ", "/"))
    return sep.join(_pick(rng, forms)() for _ in range(rng.randrange(1, 6)))


def whitespace(rng):
    """Runs of every kind of space between words and at both ends, some of
    them hundreds long."""
    if rng.random() < 0.1:
        run = _pick(rng, (" ", "\t", "\n", "\r\n", "\u3000", " \n")) * rng.randrange(20, 400)
        return _pick(rng, ("", _word(rng))) + run + _pick(rng, ("", _word(rng), " x"))
    out = [_pick(rng, SPACES) * rng.randrange(1, 4) if rng.random() < 0.5 else ""]
    for _ in range(rng.randrange(1, 8)):
        out.append(_word(rng) if rng.random() < 0.7 else _pick(rng, PUNCT))
        out.append("".join(_pick(rng, SPACES) for _ in range(rng.randrange(1, 5))))
    if rng.random() < 0.5:
        out.pop()
    return "".join(out)


def _codepoints(rng, lo, hi, k):
    return "".join(chr(rng.randrange(lo, hi)) for _ in range(k))


def cjk(rng):
    parts = [_pick(rng, CJK_PHRASES), _codepoints(rng, 0x4E00, 0x9FA6, rng.randrange(1, 12)),
             _pick(rng, ("，", "。", "、", "：", "？", "！", " ", "")), _word(rng)]
    rng.shuffle(parts)
    return "".join(parts[:rng.randrange(1, 5)])


def japanese_korean(rng):
    parts = [_pick(rng, JAPANESE_PHRASES), _codepoints(rng, 0x3041, 0x3097, rng.randrange(1, 8)),
             _codepoints(rng, 0x30A1, 0x30FB, rng.randrange(1, 8)), _pick(rng, KOREAN_PHRASES),
             _codepoints(rng, 0xAC00, 0xD7A4, rng.randrange(1, 8)), _codepoints(rng, 0xFF66, 0xFF9E, 3)]
    rng.shuffle(parts)
    return _pick(rng, ("", " ", "\n")).join(parts[:rng.randrange(1, 5)])


def arabic_hindi(rng):
    # Arabic letters with harakat, Devanagari consonants with vowel signs,
    # virama and nukta (combining marks, category M, that \p{L} does not match).
    arabic = "".join(chr(rng.randrange(0x0621, 0x064B)) + (chr(rng.randrange(0x064B, 0x0653))
                                                            if rng.random() < 0.4 else "")
                     for _ in range(rng.randrange(1, 10)))
    hindi = "".join(chr(rng.randrange(0x0915, 0x093A)) + _pick(rng, ("", "\u093e", "\u093f", "\u0940", "\u0947",
                                                                      "\u094d", "\u093c", "\u0902", "\u0941"))
                    for _ in range(rng.randrange(1, 10)))
    parts = [_pick(rng, ARABIC_PHRASES), arabic, _pick(rng, HINDI_PHRASES), hindi, _pick(rng, OTHER_SCRIPTS)]
    rng.shuffle(parts)
    return _pick(rng, (" ", "\n", ", ", "")).join(parts[:rng.randrange(1, 5)])


def emoji(rng):
    out = []
    for _ in range(rng.randrange(1, 8)):
        out.append(_pick(rng, EMOJI) if rng.random() < 0.7 else _word(rng))
        out.append(_pick(rng, ("", "", " ", "  ", "\n", "!")))
    return "".join(out)


def normalization(rng):
    out = []
    for _ in range(rng.randrange(1, 6)):
        out.append(_pick(rng, NORMALIZATION))
        out.append(_pick(rng, ("", " ", _word(rng), "\n", "1")))
    return "".join(out)


def random_codepoints(rng):
    """Code points of every plane but surrogates (which UTF-8 cannot carry):
    controls and NUL, unassigned, private use, noncharacters, tags."""
    out = []
    for _ in range(rng.randrange(1, 16)):
        r = rng.random()
        if r < 0.15:
            cp = rng.randrange(0, 0x80)
        elif r < 0.3:
            cp = rng.randrange(0x80, 0x800)
        elif r < 0.6:
            cp = rng.choice((rng.randrange(0x800, 0xD800), rng.randrange(0xE000, 0x10000)))
        elif r < 0.85:
            cp = rng.randrange(0x10000, 0x30000)
        else:
            cp = rng.randrange(0x30000, 0x110000)
        out.append(chr(cp))
    return "".join(out)


def short(rng):
    """Empty, one character, or two."""
    pool = (" ", "\n", "\r", "\t", "a", "A", "1", "'", "é", "中", "😀", "\u0301", "\u00a0", "\u3000", "\x00", ".")
    return "".join(_pick(rng, pool) for _ in range(rng.randrange(3)))


KINDS = ((prose, 22), (code, 12), (numbers, 10), (whitespace, 10), (contractions, 6), (cjk, 5),
         (japanese_korean, 5), (arabic_hindi, 5), (emoji, 6), (normalization, 6), (random_codepoints, 6),
         (short, 3))
_KIND_TABLE = [k for k, w in KINDS for _ in range(w)]


def _one(rng):
    return _pick(rng, _KIND_TABLE)(rng)


def with_specials(rng, specials):
    """Added tokens inside words, between spaces, at both ends, doubled, and
    pieces and case variants of them that must not match."""
    out = []
    for _ in range(rng.randrange(1, 6)):
        tok = _pick(rng, specials)
        r = rng.random()
        if r < 0.1 and len(tok) > 1:
            tok = tok[:rng.randrange(1, len(tok))]           # a prefix: no match
        elif r < 0.15:
            tok = tok.upper() if tok != tok.upper() else tok.lower()
        elif r < 0.25:
            tok = tok * 2
        left = _pick(rng, ("", "", " ", "  ", "\n", "word", "word ", " \t", "\u00a0", "中"))
        right = _pick(rng, ("", "", " ", "  ", "\n", "word", " word", "\t ", ".", "😀"))
        out.append(left + tok + right)
        if rng.random() < 0.5:
            out.append(_one(rng)[:200])
    return "".join(out)


def _long(rng):
    parts, n = [], 0
    while n < LONG_CHARS:
        s = _one(rng)
        parts.append(s)
        n += len(s) + 1
    return _pick(rng, ("\n", " ", "")).join(parts)[:LONG_CHARS]


def texts(n, seed, specials=()):
    """n strings: one kind each, mixtures of kinds, added tokens (when given)
    and a few long ones, in a fixed order for a given seed."""
    rng = random.Random(seed)
    specials = list(specials)
    out = ["", " ", "a", "\n", "\r\n", "'s", "'S", "123", "😀", "\u00a0", "e\u0301"]
    out += [s for tok in specials[:50] for s in (tok, " " + tok + " ", tok + tok)]
    while len(out) < n:
        r = rng.random()
        if r < 0.002:
            out.append(_long(rng))
        elif specials and r < 0.12:
            out.append(with_specials(rng, specials))
        elif r < 0.25:
            out.append(_pick(rng, ("", " ", "\n", "  ")).join(_one(rng) for _ in range(rng.randrange(2, 5))))
        else:
            out.append(_one(rng))
    return out[:n]


def prose_lines(n, seed):
    """Lines of prose, code, numbers and several scripts, as training text."""
    rng = random.Random(seed)
    kinds = (prose, prose, prose, code, numbers, cjk, japanese_korean, arabic_hindi, contractions, whitespace)
    return [_pick(rng, kinds)(rng) for _ in range(n)]
