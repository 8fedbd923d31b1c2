#!/usr/bin/python3
"""Prints the tables of tests/engine/tokenizer/reference_vectors_test.cc.

Run by hand, not by ctest: it needs Debian's python3-sentencepiece and
python3-regex (apt-get install python3-sentencepiece python3-regex). Usage:

  /usr/bin/python3 tests/engine/tokenizer/reference_vectors.py \\
      ../shared/models/stories260K.gguf > /tmp/vectors.txt

and paste them into the test. The ids come from implementations that
share no code with engine/tokenizer/:

- SPM: SentencePiece itself, on a model rebuilt from stories260K.gguf's
  pieces, scores and token types (GGUF numbers them as SentencePiece does):
  BPE with byte fallback, identity normalisation, a dummy "▁" prefix and
  whitespace kept, as llama2.c trained it. llama.cpp's own SPM test vectors
  are SentencePiece's (through Hugging Face's tokenizer) too.
- BPE: GPT-2's byte-level algorithm (bytes spelled as printable code points,
  the lowest-ranked adjacent pair merged first, a word that is itself a
  token taken whole for llama3), over the words the pre-tokenizer patterns of
  the models' tokenizer.json files find with the `regex` module. The merges
  are learned here from CORPUS, most frequent pair first.
"""
import struct
import sys
from collections import Counter

import regex
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as pb

# The inputs: the kinds of text llama.cpp's test-tokenizer-0 feeds every
# vocabulary (whitespace runs, tabs and newlines, contractions, digit and
# punctuation runs, accents, Cyrillic, Thai, CJK, emoji and ZWJ sequences,
# special-token text).
INPUTS = [
    "", " ", "  ", "   ", "\t", "\n", "\n\n", "\t\n", " \n ",
    "Hello world", " Hello world", "Hello World", " Hello World!", "Hello, world!",
    "  Hello", "    Hello\n    Hello",
    "Once upon a time, there was a little girl named Lily.",
    "She said: \"Don't go!\" and ran.",
    "it's they're we'll I'd you've IT'S",
    "123 4567 89012", "3.14159", "!!!!!!", "...", "( [ { } ] )", "a\tb\tc",
    "na\u00efve caf\u00e9", "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35", "\u6211\u60f3\u5728\u82f9\u679c\u5de5\u4f5c",
    "\U0001f999 llamas \U0001f680", "\U0001f469\u200d\U0001f469\u200d\U0001f467",
    "e\u0301", "UPPER lower MiXeD", "<s> </s> <unk>", "\u2581already escaped",
    "The dog's ball was red. He liked to play with it every day!",
    "line one\n\n  line two\t\n", "HELLO, WORLD? 2024-05-17 12:30",
]

CORPUS = """Once upon a time, there was a little girl named Lily. She liked to play
outside in the sun with her dog. The dog's ball was red. He liked to play with it every day!
"Don't go!" she said, and they're happy. We'll see what you've done. It's 12:30 on 2024-05-17.
Hello world. Hello World! HELLO, WORLD? 1234567890 3.14159 ... !!! ??? --- ***
    indented line
\ttabbed line

  the end."""
N_MERGES = 96


def read_gguf_metadata(path):
    data = open(path, 'rb').read()
    off = 0

    def take(fmt):
        nonlocal off
        v = struct.unpack_from('<' + fmt, data, off)[0]
        off += struct.calcsize('<' + fmt)
        return v

    def string():
        nonlocal off
        n = take('Q')
        off += n
        return data[off - n:off].decode('utf-8')

    scalar = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q',
              11: 'q', 12: 'd'}

    def value(t):
        if t in scalar:
            return take(scalar[t])
        if t == 8:
            return string()
        if t == 9:
            et, n = take('I'), take('Q')
            return [value(et) for _ in range(n)]
        raise ValueError('GGUF value type %d' % t)

    assert data[:4] == b'GGUF'
    off = 4
    take('I')  # version
    take('Q')  # tensors
    return {string(): value(take('I')) for _ in range(take('Q'))}


def spm_processor(kv):
    m = pb.ModelProto()
    for piece, score, typ in zip(kv['tokenizer.ggml.tokens'], kv['tokenizer.ggml.scores'],
                                 kv['tokenizer.ggml.token_type']):
        p = m.pieces.add()
        p.piece, p.score, p.type = piece, score, typ
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.unk_id, m.trainer_spec.bos_id, m.trainer_spec.eos_id = 0, 1, 2
    m.trainer_spec.pad_id = -1
    m.normalizer_spec.name = 'identity'
    m.normalizer_spec.add_dummy_prefix = True
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(m.SerializeToString())
    return sp


def bytes_to_unicode():
    # GPT-2's table: printable Latin-1 bytes stand for themselves, the rest
    # map to 256, 257, ... in byte order.
    keep = [*range(ord('!'), ord('~') + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table, n = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


B2U = bytes_to_unicode()
PATTERNS = {
    'gpt-2': r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
    'llama3': r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"""
              r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    'qwen2': r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
             r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
}
IGNORE_MERGES = {'llama3'}


def spell(text):
    return [B2U[b] for b in text.encode('utf-8')]


def learn_merges(n):
    words = Counter(regex.findall(PATTERNS['gpt-2'], CORPUS))
    seqs = {w: spell(w) for w in words}
    merges = []
    for _ in range(n):
        pairs = Counter()
        for w, count in words.items():
            for pair in zip(seqs[w], seqs[w][1:]):
                pairs[pair] += count
        if not pairs:
            break
        # Most frequent; ties to the smallest pair, for a stable order.
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        for w in words:
            s, out, i = seqs[w], [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    out.append(s[i] + s[i + 1])
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return merges


def bpe_encode(text, pre, vocab, ranks):
    ids = []
    for word in regex.findall(PATTERNS[pre], text):
        parts = spell(word)
        if pre in IGNORE_MERGES and ''.join(parts) in vocab:
            ids.append(vocab[''.join(parts)])
            continue
        while len(parts) > 1:
            ranked = [(ranks[p], i) for i, p in enumerate(zip(parts, parts[1:])) if p in ranks]
            if not ranked:
                break
            _, i = min(ranked)
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        ids.extend(vocab[p] for p in parts)
    return ids


def cpp(s):
    out = ''
    for ch in s:
        c = ord(ch)
        if ch in '\\"':
            out += '\\' + ch
        elif ch == '\n':
            out += '\\n'
        elif ch == '\t':
            out += '\\t'
        elif 0x20 <= c < 0x7f:
            out += ch
        else:
            out += '\\u%04X' % c if c <= 0xFFFF else '\\U%08X' % c
    return '"' + out + '"'


def print_table(name, rows):
    """Rows as C++ initialisers, wrapped at 100 columns."""
    print('// %s' % name)
    for text, ids in rows:
        line = '    {%s, {' % cpp(text)
        for i, n in enumerate(ids):
            item = str(n) + (', ' if i + 1 < len(ids) else '')
            if len(line) + len(item.rstrip()) + (3 if i + 1 == len(ids) else 0) > 100:
                print(line.rstrip())
                line = '         '
            line += item
        print(line + '}},')


def main():
    sp = spm_processor(read_gguf_metadata(sys.argv[1]))
    print_table('SPM (stories260K)', [(t, sp.EncodeAsIds(t)) for t in INPUTS])
    merges = learn_merges(N_MERGES)
    tokens = [B2U[b] for b in range(256)] + [a + b for a, b in merges]
    assert len(set(tokens)) == len(tokens), 'two merges make one token'
    vocab = {t: i for i, t in enumerate(tokens)}
    ranks = {m: r for r, m in enumerate(merges)}
    print('// merges')
    line = '   '
    for a, b in merges:
        item = ' ' + cpp(a + ' ' + b) + ','
        if len(line) + len(item) > 100:
            print(line)
            line = '   '
        line += item
    print(line)
    for pre in PATTERNS:
        print_table('BPE ' + pre, [(t, bpe_encode(t, pre, vocab, ranks)) for t in INPUTS])


if __name__ == '__main__':
    main()
