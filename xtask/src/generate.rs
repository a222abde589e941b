//! `cargo xtask generate`: transformers' `generate` on any family that decodes, with the
//! model directory's `generation_config.json` (else `config.json`) as defaults and HF-named
//! flags over them. One JSON line per input, in input order.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use burn::prelude::*;
use sesame_generate::config::EarlyStoppingValue;
use sesame_generate::{GenerateError, GenerationConfig, Generated, Ids, TokenStreamer};
use sesame_generate::decoding::{LanguageModel, Source};
use sesame_pipelines::generate::{continue_ids, generate_ids, open_prompt, rows_per_input};
use sesame::auto::{Checkpoint, GeneratorKind, WithFamily};
use sesame_layers::{Family, InputError, PretrainedModel};
use sesame_text::Tokenizer;

/// What to generate from, and how.
#[derive(clap::Args, Debug)]
pub struct GenerateArgs {
    /// Run the model's linear layers in int8 (see `embed --int8`).
    #[arg(long)]
    pub int8: bool,
    /// HF model directory (config.json, weights; a tokenizer unless the inputs are ids).
    #[arg(long, value_parser = crate::common::model_dir)]
    pub model: PathBuf,
    /// Texts to generate from (or --input).
    #[arg(conflicts_with = "input")]
    pub texts: Vec<String>,
    /// Read inputs from this file (`-` for stdin): one text per line, or JSON lines with a
    /// "text" or an "input_ids" field (token ids, for a model without a tokenizer).
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Inputs per batch (an encoder-decoder batches sources; a left-to-right model runs each
    /// prompt alone, since prompts are not padded).
    #[arg(long, default_value_t = 8, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    pub batch_size: usize,
    /// Most tokens to generate.
    #[arg(long)]
    pub max_new_tokens: Option<usize>,
    /// Longest sequence, prompt (or decoder start) included, when --max-new-tokens is not given.
    #[arg(long)]
    pub max_length: Option<usize>,
    /// No end-of-sequence token before the sequence is this long.
    #[arg(long)]
    pub min_length: Option<usize>,
    /// No end-of-sequence token before this many tokens were generated.
    #[arg(long)]
    pub min_new_tokens: Option<usize>,
    /// Beams per input (beam search when above 1).
    #[arg(long)]
    pub num_beams: Option<usize>,
    /// Sequences per input (at most --num-beams; with --do-sample, independent draws).
    #[arg(long)]
    pub num_return_sequences: Option<usize>,
    /// Beam search's length exponent.
    #[arg(long, allow_hyphen_values = true)]
    pub length_penalty: Option<f32>,
    /// Beam search's stopping rule: true, false or never.
    #[arg(long)]
    pub early_stopping: Option<String>,
    /// Sample the next token instead of searching.
    #[arg(long)]
    pub do_sample: bool,
    /// Sampling temperature.
    #[arg(long)]
    pub temperature: Option<f32>,
    /// Sampling keeps the k best tokens (0: all).
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Sampling keeps the smallest set of best tokens of this probability mass.
    #[arg(long)]
    pub top_p: Option<f32>,
    /// CTRL's repetition penalty (above 1 discourages repeats).
    #[arg(long)]
    pub repetition_penalty: Option<f32>,
    /// No n-gram of this size occurs twice.
    #[arg(long)]
    pub no_repeat_ngram_size: Option<usize>,
    /// End-of-sequence id, replacing the model's.
    #[arg(long)]
    pub eos_token_id: Option<u32>,
    /// Seed of sampling: the same seed, inputs, model and backend give the same tokens.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Also print tokens as soon as they are final, one JSON line each time:
    /// {"input", "tokens", "text"} ("sequence" too when sampling several), "text" being
    /// everything streamed for it so far; beam search streams what every hypothesis still in
    /// the running shares. Each input's result line follows as without --stream.
    #[arg(long)]
    pub stream: bool,
    /// Decode sequence to sequence as UniLM does, from a UniLM (BERT) checkpoint: each input is
    /// the source `[CLS] S [SEP]`, which sees itself bidirectionally, and the target is written
    /// left to right after it, each token the cloze prediction of a `[MASK]` under the
    /// seq-to-seq mask; it ends at `[SEP]` unless --eos-token-id says otherwise.
    #[arg(long)]
    pub unilm_seq2seq: bool,
    /// The mask token of --unilm-seq2seq when the model has no tokenizer (inputs as ids).
    #[arg(long, requires = "unilm_seq2seq")]
    pub mask_token_id: Option<u32>,
    /// Text put before every text input (transformers' pipeline `prefix`): XLNet continues a
    /// short prompt better after a long padding text.
    #[arg(long)]
    pub prefix: Option<String>,
}

impl GenerateArgs {
    /// The flags given, as generation settings.
    fn settings(&self) -> Result<GenerationConfig, String> {
        let early_stopping = match self.early_stopping.as_deref() {
            None => None,
            Some("true") => Some(EarlyStoppingValue::Bool(true)),
            Some("false") => Some(EarlyStoppingValue::Bool(false)),
            Some("never") => Some(EarlyStoppingValue::Text("never".into())),
            Some(other) => return Err(format!("--early-stopping {other}: expected true, false or never")),
        };
        Ok(GenerationConfig {
            max_new_tokens: self.max_new_tokens,
            max_length: self.max_length,
            min_length: self.min_length,
            min_new_tokens: self.min_new_tokens,
            num_beams: self.num_beams,
            num_return_sequences: self.num_return_sequences,
            length_penalty: self.length_penalty,
            early_stopping,
            do_sample: self.do_sample.then_some(true),
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            repetition_penalty: self.repetition_penalty,
            no_repeat_ngram_size: self.no_repeat_ngram_size,
            eos_token_id: self.eos_token_id.map(Ids::One),
            ..GenerationConfig::default()
        })
    }
}

/// The model directory's settings with the flags over them, for a model of `max_positions`,
/// checked, with flag names in errors; `default_eos` when neither sets an end-of-sequence id.
pub(crate) fn settings(dir: &Path, args: &GenerateArgs, (max_positions, vocab_size): (usize, usize), default_eos: Option<u32>) -> Result<GenerationConfig, String> {
    let flags = args.settings()?;
    // A setting out of range names the flag when the flags set it, else the model's file.
    let culprit = |e: sesame_generate::ProcessorError| {
        let sesame_generate::ProcessorError::OutOfRange { name, .. } = &e;
        // (JSON writes a NaN as null: the float settings are looked at directly.)
        let given = match *name {
            "temperature" => flags.temperature.is_some(),
            "top_p" => flags.top_p.is_some(),
            "repetition_penalty" => flags.repetition_penalty.is_some(),
            "length_penalty" => flags.length_penalty.is_some(),
            other => serde_json::to_value(&flags).ok().and_then(|v| v.get(other).map(|v| !v.is_null())).unwrap_or(true),
        };
        match given {
            true => flag_error(&e.to_string()),
            false => format!("{}: {e} (generation_config.json, else config.json)", dir.display()),
        }
    };
    let mut config = GenerationConfig::from_dir(dir).map_err(|e| e.to_string())?.overridden_by(&flags);
    config.validate_ids(vocab_size).map_err(culprit)?;
    config.model_max_positions = Some(max_positions);
    if config.eos_token_id.is_none() {
        config.eos_token_id = default_eos.map(Ids::One);
    }
    config.validate().map_err(culprit)?;
    if config.eos_token_id.is_none() {
        return Err(format!(
            "{}: no end-of-sequence id (neither generation_config.json nor config.json sets eos_token_id): give --eos-token-id",
            dir.display()
        ));
    }
    Ok(config)
}

/// `loaded`, unless a tensor of its language-modelling head was missing from the checkpoint
/// ([`sesame_pipelines::generator::check_lm_head`]).
pub(crate) fn lm_head_loaded<M, C>(dir: &Path, loaded: sesame_layers::Pretrained<M, C>) -> Result<sesame_layers::Pretrained<M, C>, String> {
    sesame_pipelines::generator::check_lm_head(dir, &loaded.report)?;
    crate::common::report(&loaded.report);
    Ok(loaded)
}

/// A settings error with transformers' argument name written as the flag (`--num-beams`).
fn flag_error(message: &str) -> String {
    let mut out = message.to_string();
    for name in ["num_return_sequences", "num_beams", "do_sample", "early_stopping", "max_length", "max_new_tokens", "temperature", "top_k", "top_p", "repetition_penalty", "no_repeat_ngram_size", "length_penalty", "eos_token_id"] {
        out = out.replace(&format!("`{name}`"), &format!("--{}", name.replace('_', "-")));
    }
    out
}

/// One input: a text, or token ids.
pub(crate) enum Input {
    Text(String),
    Ids(Vec<u32>),
}

/// The inputs, read as they are needed: from the arguments, or line by line from `--input`
/// (so that results stream while the rest is still being read). Numbered from 1 in errors.
pub(crate) struct Inputs {
    name: String,
    lines: Option<Box<dyn BufRead>>,
    texts: std::vec::IntoIter<String>,
    read: usize,
    /// Put before every text (`--prefix`).
    prefix: String,
}

impl Inputs {
    pub(crate) fn open(args: &GenerateArgs) -> Result<Self, String> {
        let prefix = args.prefix.clone().unwrap_or_default();
        let Some(path) = &args.input else {
            if args.texts.is_empty() {
                return Err("no inputs: give texts as arguments, or read them with --input FILE (- for stdin)".into());
            }
            return Ok(Self { name: "arguments".into(), lines: None, texts: args.texts.clone().into_iter(), read: 0, prefix });
        };
        let (name, reader) = crate::common::open_input(path)?;
        Ok(Self { name, lines: Some(reader), texts: Vec::new().into_iter(), read: 0, prefix })
    }

    /// The number of inputs read so far (the next one's index).
    pub(crate) fn read(&self) -> usize {
        self.read
    }

    /// The next `n` inputs (fewer at the end, none when all are read).
    pub(crate) fn next_batch(&mut self, n: usize) -> Result<Vec<Input>, String> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let Some(input) = self.next_input()? else { break };
            out.push(input);
        }
        Ok(out)
    }

    fn next_input(&mut self) -> Result<Option<Input>, String> {
        Ok(self.next_raw()?.map(|input| match input {
            Input::Text(text) if !self.prefix.is_empty() => Input::Text(format!("{}{text}", self.prefix)),
            other => other,
        }))
    }

    fn next_raw(&mut self) -> Result<Option<Input>, String> {
        let Some(reader) = self.lines.as_mut() else {
            self.read += usize::from(self.texts.len() > 0);
            return Ok(self.texts.next().map(Input::Text));
        };
        let mut line = String::new();
        let line_no = self.read + 1;
        if reader.read_line(&mut line).map_err(|e| format!("{}: line {line_no}: {e}", self.name))? == 0 {
            return Ok(None);
        }
        self.read += 1;
        let line = line.strip_suffix('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).unwrap_or(&line);
        match sesame_text::inputs::parse_input_line(line, true) {
            Ok(sesame_text::inputs::InputLine::Text(text)) => Ok(Some(Input::Text(text))),
            Ok(sesame_text::inputs::InputLine::Ids(ids)) => Ok(Some(Input::Ids(ids))),
            Err(e) => Err(format!("{}: line {line_no}: {e}", self.name)),
        }
    }
}

/// The tokenizer of `dir`, or why there is none (an error only once a text input needs it).
pub(crate) fn tokenizer(dir: &Path) -> (Option<Tokenizer>, Option<String>) {
    match Tokenizer::from_dir(dir) {
        Ok(t) => (Some(t), None),
        Err(e) => (None, Some(format!("{e} (inputs given as \"input_ids\" need no tokenizer)"))),
    }
}

/// Token ids of `inputs` (the first numbered `first + 1` in errors), each at most `max_len`
/// long; `missing` says why there is no tokenizer, for a text input.
pub(crate) fn encode(inputs: &[Input], first: usize, (tokenizer, missing): (Option<&Tokenizer>, Option<&String>), max_len: usize) -> Result<Vec<Vec<u32>>, String> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, input)| {
            let n = first + i + 1;
            let ids = match input {
                Input::Ids(ids) => ids.clone(),
                Input::Text(text) => {
                    let tokenizer = tokenizer.ok_or_else(|| format!("input {n}: {}", missing.map_or("no tokenizer", String::as_str)))?;
                    let encoded = tokenizer.encode_each(&[text.as_str()], usize::MAX, false).map_err(|e| format!("input {n}: {e}"))?;
                    encoded[0].input_ids.iter().map(|&t| t as u32).collect()
                }
            };
            if ids.is_empty() {
                return Err(format!("input {n}: no tokens"));
            }
            if ids.len() > max_len {
                return Err(format!("input {n}: {} tokens exceed the model's {max_len} positions (shorten it)", ids.len()));
            }
            Ok(ids)
        })
        .collect()
}

/// Print each input's rows (`per_input` consecutive rows of `out`) as a JSON line.
pub(crate) fn print(out: &Generated, per_input: usize, tokenizer: Option<&Tokenizer>, inputs: usize) -> Result<(), String> {
    let mut stdout = std::io::stdout().lock();
    for i in 0..inputs {
        let rows = &out.sequences[i * per_input..(i + 1) * per_input];
        let mut line = serde_json::json!({ "sequences": rows });
        if let Some(tokenizer) = tokenizer {
            let texts = rows.iter().map(|r| tokenizer.decode(r)).collect::<Result<Vec<_>, _>>().map_err(|e| e.to_string())?;
            line["texts"] = texts.into();
        }
        if let Some(scores) = &out.sequences_scores {
            let scores = &scores[i * per_input..(i + 1) * per_input];
            if scores.iter().any(|s| !s.is_finite()) {
                return Err(format!("input {}: the sequence scores are not finite; the checkpoint overflows", i + 1));
            }
            line["sequences_scores"] = scores.into();
        }
        writeln!(stdout, "{line}").map_err(|e| format!("cannot write to stdout: {e}"))?;
    }
    stdout.flush().map_err(|e| format!("cannot write to stdout: {e}"))
}

/// `--stream`: a JSON line on stdout for each piece of final tokens of a row of the search
/// (inputs from `first`, each given `repeat` times).
pub(crate) struct LineStreamer<'a> {
    on: bool,
    first: usize,
    repeat: usize,
    tokenizer: Option<&'a Tokenizer>,
    so_far: std::collections::BTreeMap<usize, Vec<u32>>,
    /// The first write or decoding error, reported when the search returns.
    error: Option<String>,
}

impl<'a> LineStreamer<'a> {
    pub(crate) fn new(args: &GenerateArgs, first: usize, repeat: usize, tokenizer: Option<&'a Tokenizer>) -> Self {
        Self { on: args.stream, first, repeat, tokenizer, so_far: Default::default(), error: None }
    }

    fn line(&mut self, row: usize, tokens: &[u32]) -> Result<(), String> {
        let so_far = self.so_far.entry(row).or_default();
        so_far.extend_from_slice(tokens);
        let mut line = serde_json::json!({ "input": self.first + row / self.repeat, "tokens": tokens });
        if self.repeat > 1 {
            line["sequence"] = (row % self.repeat).into();
        }
        if let Some(tokenizer) = self.tokenizer {
            line["text"] = tokenizer.decode(so_far).map_err(|e| e.to_string())?.into();
        }
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{line}").and_then(|_| stdout.flush()).map_err(|e| format!("cannot write to stdout: {e}"))
    }

    /// The search's result, or the first streaming error.
    pub(crate) fn finish<T>(self, result: Result<T, String>) -> Result<T, String> {
        match self.error {
            Some(e) => Err(e),
            None => result,
        }
    }
}

impl TokenStreamer for LineStreamer<'_> {
    fn put(&mut self, row: usize, tokens: &[u32]) {
        if self.on && self.error.is_none() {
            self.error = self.line(row, tokens).err();
        }
    }
}

pub(crate) fn search_error(e: GenerateError<InputError>, batch: std::ops::Range<usize>) -> String {
    match e {
        GenerateError::Settings(e) => flag_error(&e.to_string()),
        GenerateError::Model(e) => format!("inputs {}..={}: {e}", batch.start + 1, batch.end),
    }
}

/// `generate` for an encoder-decoder `M` (BART): sources batched and padded, encoded once.
fn generate_seq2seq<M: PretrainedModel + LanguageModel<Source = Source>>(args: &GenerateArgs, device: &Device) -> Result<(), String> {
    let dir = &args.model;
    let mut inputs = Inputs::open(args)?;
    let (tokenizer, missing) = tokenizer(dir);
    let loaded = lm_head_loaded(dir, crate::common::int8_if_asked(M::from_pretrained(dir, device).map_err(|e| e.to_string())?))?;
    let (model, limits) = (loaded.model, M::limits(&loaded.config));
    let config = settings(dir, args, (limits.max_len, limits.vocab_size), None)?;
    let start = config.decoder_start_token_id.or(config.bos_token_id).ok_or_else(|| {
        format!("{}: no decoder start (neither decoder_start_token_id nor bos_token_id is set)", dir.display())
    })?;
    let (per_input, repeat) = rows_per_input(&config);
    loop {
        let first = inputs.read();
        let batch = encode(&inputs.next_batch(args.batch_size)?, first, (tokenizer.as_ref(), missing.as_ref()), limits.max_len)?;
        if batch.is_empty() {
            break;
        }
        let mut streamer = LineStreamer::new(args, first, repeat, tokenizer.as_ref());
        let out = generate_ids(&model, &loaded.config, &batch, start, &config, args.seed, &mut streamer).map_err(|e| search_error(e, first..first + batch.len()));
        print(&streamer.finish(out)?, per_input, tokenizer.as_ref(), batch.len())?;
    }
    Ok(())
}

/// `generate` on the checkpoint `--model`: its family's left-to-right model or encoder-decoder
/// ([`sesame::auto::generator_kind`] picks it, as `pipeline(Task::Generate, …)` does).
pub fn generate(args: &GenerateArgs, device: &Device) -> Result<(), String> {
    struct Generate<'a> {
        args: &'a GenerateArgs,
        device: &'a Device,
        checkpoint: &'a Checkpoint,
    }
    impl WithFamily for Generate<'_> {
        type Out = Result<(), String>;
        fn with<F: Family>(self) -> Self::Out {
            let Generate { args, device, checkpoint } = self;
            match sesame::auto::generator_kind::<F>(&checkpoint.dir, &checkpoint.config).map_err(|e| e.to_string())? {
                GeneratorKind::Seq2Seq => generate_seq2seq::<F::ForConditionalGeneration>(args, device),
                GeneratorKind::Causal => generate_left_to_right::<F::ForCausalLM>(args, device),
            }
        }
    }
    let checkpoint = sesame::auto::locate(&args.model).map_err(|e| e.to_string())?;
    checkpoint.with_family(Generate { args, device, checkpoint: &checkpoint }).map_err(|e| e.to_string())?
}

/// `generate` for a left-to-right model `M`: each prompt alone, continued after its last token.
pub(crate) fn generate_left_to_right<M>(args: &GenerateArgs, device: &Device) -> Result<(), String>
where
    M: LanguageModel<Source = ()>,
{
    let dir = &args.model;
    let mut inputs = Inputs::open(args)?;
    let (tokenizer, missing) = tokenizer(dir);
    let loaded = lm_head_loaded(dir, crate::common::int8_if_asked(M::from_pretrained(dir, device).map_err(|e| e.to_string())?))?;
    let limits = M::limits(&loaded.config);
    let config = settings(dir, args, (limits.max_len, limits.vocab_size), None)?;
    let (per_input, repeat) = rows_per_input(&config);
    loop {
        let i = inputs.read();
        let input = inputs.next_batch(1)?;
        let Some(mut prompt) = encode(&input, i, (tokenizer.as_ref(), missing.as_ref()), limits.max_len)?.pop() else { break };
        if let (Input::Text(_), Some(tokenizer)) = (&input[0], &tokenizer) {
            prompt = open_prompt(tokenizer, prompt);
        }
        let mut streamer = LineStreamer::new(args, i, repeat, tokenizer.as_ref());
        let out = continue_ids(&loaded.model, &loaded.config, &prompt, &config, args.seed, &mut streamer).map_err(|e| search_error(e, i..i + 1));
        print(&streamer.finish(out)?, per_input, tokenizer.as_ref(), 1)?;
    }
    Ok(())
}

