"""payment_stream.py - the payment stream of "idem-kafkatool produce" (idem_kafkatool.c), for the
encoders that write it in other formats (avro_encode.py, proto_encode.py, json_frame.py): the same RNG and the
same draws, so that with --partitions equal to the topic's partition count the payment ids,
accounts, amounts, partitions and duplicates are those of "idem-kafkatool produce" with the same
--count --dup-ratio --seed --accounts.
"""

import argparse
import sys

M64 = (1 << 64) - 1
TS_BASE = 1735689600000  # 2025-01-01T00:00:00Z, as KT_TS_BASE in idem_kafkatool.c
FAR_GAP = 256  # KT_FAR_GAP


class SplitMix64:
    """idem_kafkatool.c's rng_next/rng_unit/rng_below, bit for bit."""

    def __init__(self, seed):
        self.state = seed & M64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & M64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)

    def unit(self):
        return (self.next() >> 11) * (2.0 ** -53)

    def below(self, n):
        return self.next() % n


def fnv1a(s):
    h = 2166136261
    for b in s.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def parser(prog):
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--dup-ratio", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--schema-id", type=int, required=True)
    p.add_argument("--accounts", type=int, default=50)
    p.add_argument("--partitions", type=int)
    p.add_argument("--manifest")
    p.add_argument("--output")
    return p


def write(p, a, encode):
    """Writes the stream of the options @a (from parser()) with encode(payment_id, account,
    amount, created_ms) -> the value's bytes. Key: the payment id as text; a duplicate re-sends
    the earlier message byte for byte."""
    if a.count < 0 or not 0 <= a.dup_ratio <= 1 or a.seed < 0 or a.accounts < 1 or (a.partitions is not None and a.partitions < 1):
        p.error("invalid value (count >= 0, 0 <= dup-ratio <= 1, seed >= 0, accounts >= 1, partitions >= 1)")
    nparts = a.partitions or 1
    rng = SplitMix64(a.seed)
    rows = []  # per unique payment: (key hex + TAB + value hex, partition)
    out = open(a.output, "w", encoding="ascii") if a.output else sys.stdout
    manifest = open(a.manifest, "w", encoding="ascii") if a.manifest else None
    gap = FAR_GAP * nparts
    unique = 0
    for _ in range(a.count):
        if unique > 0 and rng.unit() < a.dup_ratio:
            kind = rng.unit()
            if kind < 0.4:
                idx = unique - 1
                part = rows[idx][1]
            elif kind < 0.8 or nparts == 1:
                idx = rng.below(unique - gap if unique > gap else unique)
                part = rows[idx][1]
            else:
                idx = rng.below(unique)
                part = (rows[idx][1] + 1 + rng.below(nparts - 1)) % nparts
        else:
            idx = unique
            unique += 1
            account = 1 + rng.below(a.accounts)
            amount = 1 + rng.below(10000)
            pid = f"pay-{a.seed}-{idx}"
            acct = f"acct-{account}"
            value = encode(pid, acct, amount, TS_BASE + idx * 1000)
            part = fnv1a(acct) % nparts
            rows.append((f"{pid.encode().hex()}\t{value.hex()}", part))
            if manifest:
                manifest.write(f"{pid},{acct},{amount}\n")
        if a.partitions:
            out.write(f"{rows[idx][0]}\t{part}\n")
        else:
            out.write(rows[idx][0] + "\n")
    if manifest:
        manifest.close()
    summary = f"produced={a.count} unique={unique} duplicates={a.count - unique}"
    if a.output:
        out.close()
        print(summary)
    else:
        out.flush()
        print(summary, file=sys.stderr)
    return 0
