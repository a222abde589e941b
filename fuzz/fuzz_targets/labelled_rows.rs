//! A labelled file for `finetune` (the first byte picks CSV, TSV or JSON lines): read, its
//! label kind found, classes named and targets made, as `finetune` reads `--train`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sesame_text::labelled;

fuzz_target!(|data: &[u8]| {
    let (kind, data) = sesame_fuzz::pick(data, 3);
    let path = sesame_fuzz::file(["rows.csv", "rows.tsv", "rows.jsonl"][kind], data);
    for columns in [labelled::Columns::default(), labelled::Columns { pair: Some("pair".into()), ..Default::default() }] {
        let Ok(rows) = labelled::read_rows(&path, &columns) else { continue };
        let Ok(problem) = labelled::problem_type(&path, &rows) else { continue };
        let classes = labelled::class_names(&rows);
        let _ = labelled::targets(&path, &rows, problem, &classes);
    }
});
