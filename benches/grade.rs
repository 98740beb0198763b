//! Deterministic rubrics on a million answers, one thread: answers graded
//! per minute for each shipped kind of check.
//!
//! `cargo bench --bench grade`; `ROUTEVAL_BENCH_ANSWERS` changes the count.

use std::path::Path;
use std::time::Instant;

use routeval::rubric::{Rubric, load_rubrics};

#[allow(dead_code)]
#[path = "../tests/common/graded.rs"]
mod common;

use common::Random;

fn main() {
    let count: usize = std::env::var("ROUTEVAL_BENCH_ANSWERS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(1_000_000);
    let rubrics = load_rubrics(&Path::new(env!("CARGO_MANIFEST_DIR")).join("rubrics")).unwrap();
    let mut random = Random::new(3);
    // Answers shaped like real ones: a few sentences of working, then the
    // final answer, about 300 bytes.
    let math: Vec<(String, String)> = (0..count)
        .map(|index| {
            let (a, b) = (random.next_u64() % 1000, random.next_u64() % 1000);
            let answer = format!(
                "Step 1: the shop starts with {a} apples and buys {b} more, so it has {a} + {b} = <<{a}+{b}={}>>{} apples.\n\
                 Step 2: it sells half of the {} apples on Monday and keeps the rest for the weekend market.\n#### {}",
                a + b,
                a + b,
                a + b,
                if index % 4 == 0 { a + b + 1 } else { a + b }
            );
            (answer, format!("#### {}", a + b))
        })
        .collect();
    let letters = ['A', 'B', 'C', 'D'];
    let choices: Vec<(String, String)> = (0..count)
        .map(|_| {
            let given = letters[(random.next_u64() % 4) as usize];
            let expected = letters[(random.next_u64() % 4) as usize];
            (
                format!("Looking at each option in turn, the first two contradict the passage. Therefore the answer is ({given})."),
                expected.to_string(),
            )
        })
        .collect();
    let composite = Rubric::from_toml(
        Path::new("composite.toml"),
        "name = \"support\"\n[check.all]\nchecks = [\n\
         { contains = { text = \"apples\" } },\n\
         { not_contains = { text = \"as an ai\" } },\n\
         { regex = { pattern = '#### \\d+' } },\n]\n",
    )
    .unwrap();

    println!("{count} answers per rubric, one thread:");
    for (name, rubric, cases) in [
        ("gsm8k (numeric)", &rubrics["gsm8k"], &math),
        ("mmlu (choice)", &rubrics["mmlu"], &choices),
        ("exact", &rubrics["exact"], &choices),
        ("all of contains, not_contains, regex", &composite, &math),
    ] {
        let start = Instant::now();
        let passed = cases
            .iter()
            .filter(|(answer, reference)| rubric.grade(answer, Some(reference)).pass)
            .count();
        let seconds = start.elapsed().as_secs_f64();
        println!(
            "{name:>38}: {seconds:.2} s, {:.1} M answers/minute ({passed} passed)",
            count as f64 / seconds * 60.0 / 1e6
        );
    }
}
