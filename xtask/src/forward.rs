//! `cargo xtask forward`: run any head of a checkpoint on inputs given under transformers'
//! keyword names (a safetensors file), and write every output under transformers' field names:
//! how a user checks a checkpoint or a port against transformers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn::prelude::*;
use sesame_layers::{
    Backbone, EncoderInput, ForCausalLM, ForMaskedLM, ForMultipleChoice, ForPreTraining, ForQuestionAnswering, ForSequenceClassification, ForTokenClassification, InputError, NamedOutput, OutputOptions, PreTrainingLabels, PretrainedModel, SentenceHead, Seq2SeqInput, SequenceHead, SequenceLabels,
};
use sesame_layers::HfConfig as _;

/// What to run, on what, and where the outputs go.
#[derive(clap::Args, Debug)]
pub struct ForwardArgs {
    /// HF model directory (config.json and weights).
    #[arg(long, value_parser = crate::common::model_dir)]
    pub model: PathBuf,
    /// Inputs: a safetensors file of tensors named as transformers' arguments (`input_ids`,
    /// `attention_mask`, `labels`, `decoder_input_ids`, `start_positions`, …).
    #[arg(long)]
    pub inputs: PathBuf,
    /// Where to write the outputs (safetensors, float32, named as transformers' fields:
    /// `logits`, `loss`, `hidden_states.0`, `cross_attentions.1`, …).
    #[arg(long)]
    pub out: PathBuf,
    /// The HF class to run (`BartForConditionalGeneration`, `BertForQuestionAnswering`, …);
    /// default: the first of config.json's `architectures`.
    #[arg(long)]
    pub head: Option<String>,
    /// Also return every hidden state and attention map.
    #[arg(long)]
    pub all_outputs: bool,
}

/// One input tensor as read.
pub(crate) struct Input {
    pub(crate) shape: Vec<usize>,
    ints: Option<Vec<i64>>,
    floats: Option<Vec<f32>>,
}

/// The inputs of `--inputs`, by name, and the names a head took.
pub struct Inputs {
    pub(crate) file: PathBuf,
    pub(crate) tensors: BTreeMap<String, Input>,
    taken: std::cell::RefCell<Vec<String>>,
}

impl Inputs {
    pub(crate) fn read(path: &Path) -> Result<Self, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("--inputs {}: {e}", path.display()))?;
        let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| format!("--inputs {}: not a safetensors file ({e})", path.display()))?;
        let mut tensors = BTreeMap::new();
        for (name, view) in st.tensors() {
            let data = view.data();
            let (ints, floats) = match view.dtype() {
                safetensors::Dtype::I64 => (Some(data.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes"))).collect()), None),
                safetensors::Dtype::I32 => (Some(data.chunks_exact(4).map(|c| i64::from(i32::from_le_bytes(c.try_into().expect("4 bytes")))).collect()), None),
                safetensors::Dtype::F32 => (None, Some(data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect())),
                other => return Err(format!("--inputs {}: tensor `{name}` is {other:?}; inputs are I64, I32 or F32", path.display())),
            };
            tensors.insert(name, Input { shape: view.shape().to_vec(), ints, floats });
        }
        Ok(Self { file: path.to_path_buf(), tensors, taken: Default::default() })
    }

    fn fail(&self, name: &str, what: String) -> String {
        format!("--inputs {}: `{name}` {what}", self.file.display())
    }

    fn get(&self, name: &str, rank: usize) -> Result<Option<&Input>, String> {
        self.taken.borrow_mut().push(name.to_string());
        match self.tensors.get(name) {
            None => Ok(None),
            Some(t) if t.shape.len() != rank => Err(self.fail(name, format!("has shape {:?}; expected {rank} dimensions", t.shape))),
            Some(t) => Ok(Some(t)),
        }
    }

    /// Integer ids `[D]` (i64 or i32).
    pub(crate) fn ids<const D: usize>(&self, name: &str, device: &Device) -> Result<Option<Tensor<D, Int>>, String> {
        let Some(t) = self.get(name, D)? else { return Ok(None) };
        let values = t.ints.clone().ok_or_else(|| self.fail(name, "is float; ids are I64 or I32".into()))?;
        // A backend may hold integers in 32 bits: a value beyond them is no id, position or
        // label of any model (the models' own range checks see only what fits).
        if let Some((i, v)) = values.iter().enumerate().find(|(_, v)| i32::try_from(**v).is_err()) {
            return Err(self.fail(name, format!("holds {v} at flat index {i}, outside the 32-bit range of ids, positions and labels")));
        }
        let shape: [usize; D] = t.shape.clone().try_into().expect("rank checked");
        Ok(Some(Tensor::from_data(TensorData::new(values, shape), device)))
    }

    /// Labels `[D]` as transformers' losses take them: of shape `shape`, each a class in
    /// `0..classes` or, where `ignored`, -100 (the index a cross-entropy skips).
    pub(crate) fn labels<const D: usize>(&self, name: &str, shape: [usize; D], classes: usize, ignored: bool, device: &Device) -> Result<Option<Tensor<D, Int>>, String> {
        self.check_shape(name, &shape)?;
        if let Some(Input { ints: Some(values), .. }) = self.tensors.get(name) {
            if let Some((i, v)) = values.iter().enumerate().find(|(_, &v)| !(0..classes as i64).contains(&v) && !(ignored && v == -100)) {
                let ignore = if ignored { " or -100 (ignored)" } else { "" };
                return Err(self.fail(name, format!("holds {v} at flat index {i}; expected values in 0..{classes}{ignore}")));
            }
        }
        self.ids::<D>(name, device)
    }

    /// Refuse `name`, when given, unless its shape is `shape`.
    pub(crate) fn check_shape(&self, name: &str, shape: &[usize]) -> Result<(), String> {
        match self.tensors.get(name) {
            Some(t) if t.shape != shape => Err(self.fail(name, format!("has shape {:?}; expected {shape:?} from `input_ids` and the config", t.shape))),
            _ => Ok(()),
        }
    }

    /// Floats `[D]` (float targets).
    pub(crate) fn floats<const D: usize>(&self, name: &str, device: &Device) -> Result<Option<Tensor<D>>, String> {
        let Some(t) = self.get(name, D)? else { return Ok(None) };
        let values = t.floats.clone().ok_or_else(|| self.fail(name, "is an integer tensor; expected F32".into()))?;
        self.check_finite(name, &values)?;
        let shape: [usize; D] = t.shape.clone().try_into().expect("rank checked");
        Ok(Some(Tensor::from_data(TensorData::new(values, shape), device)))
    }

    /// Refuse a NaN or infinite value: it would only come back as non-finite outputs.
    fn check_finite(&self, name: &str, values: &[f32]) -> Result<(), String> {
        match values.iter().position(|v| !v.is_finite()) {
            Some(i) => Err(self.fail(name, format!("holds {} at flat index {i}; inputs must be finite", values[i]))),
            None => Ok(()),
        }
    }

    /// A float mask `[D]` given as floats or integers (`perm_mask`, `target_mapping`, `p_mask`,
    /// as transformers takes them).
    pub(crate) fn mask_values<const D: usize>(&self, name: &str, device: &Device) -> Result<Option<Tensor<D>>, String> {
        let Some(t) = self.get(name, D)? else { return Ok(None) };
        let values: Vec<f32> = match (&t.ints, &t.floats) {
            (Some(i), _) => i.iter().map(|&v| v as f32).collect(),
            (_, Some(f)) => f.clone(),
            _ => unreachable!("read as ints or floats"),
        };
        self.check_finite(name, &values)?;
        let shape: [usize; D] = t.shape.clone().try_into().expect("rank checked");
        Ok(Some(Tensor::from_data(TensorData::new(values, shape), device)))
    }

    /// A 2-D padding mask of integers or floats (non-zero = token), as HF accepts it; with
    /// `allow_4d`, a 4-D mask is left for the caller (`None`).
    pub(crate) fn padding_mask(&self, name: &'static str, allow_4d: bool, device: &Device) -> Result<Option<Tensor<2, Int>>, String> {
        match self.tensors.get(name).map(|t| t.shape.len()) {
            Some(2) | None => {}
            Some(4) if allow_4d => return Ok(None),
            Some(_) => return Err(self.fail(name, "must be a 2-D padding mask [batch, seq]".into())),
        }
        let Some(t) = self.get(name, 2)? else { return Ok(None) };
        let values: Vec<i64> = match (&t.ints, &t.floats) {
            (Some(i), _) => i.iter().map(|&v| i64::from(v != 0)).collect(),
            (_, Some(f)) => f.iter().map(|&v| i64::from(v != 0.0)).collect(),
            _ => unreachable!("read as ints or floats"),
        };
        Ok(Some(Tensor::from_data(TensorData::new(values, [t.shape[0], t.shape[1]]), device)))
    }

    /// An encoder's input: ids, a 2-D padding mask or a 4-D additive mask `[batch, 1, q, k]`
    /// (the encoder families' way to take UniLM's masks: a negative entry blocks), token types,
    /// positions.
    fn encoder(&self, device: &Device) -> Result<EncoderInput, String> {
        let ids = self.ids::<2>("input_ids", device)?.ok_or_else(|| format!("--inputs {}: no `input_ids`", self.file.display()))?;
        let mut input = EncoderInput::new(ids);
        if let Some(mask) = self.padding_mask("attention_mask", true, device)? {
            input = input.with_attention_mask(mask);
        } else if let Some(t) = self.get("attention_mask", 4)? {
            let [b, one, q, k]: [usize; 4] = t.shape.clone().try_into().expect("rank checked");
            let values = t.floats.clone().ok_or_else(|| self.fail("attention_mask", "4-D must be an additive float mask".into()))?;
            if one != 1 {
                return Err(self.fail("attention_mask", format!("has shape {:?}; a 4-D mask is [batch, 1, q, k]", t.shape)));
            }
            let blocked: Vec<i64> = values.iter().map(|&v| i64::from(v < 0.0)).collect();
            input = input.with_attention_restriction(Tensor::<3, Int>::from_data(TensorData::new(blocked, [b, q, k]), device).equal_elem(1));
        }
        if let Some(types) = self.ids::<2>("token_type_ids", device)? {
            input = input.with_token_type_ids(types);
        }
        if let Some(positions) = self.ids::<2>("position_ids", device)? {
            input = input.with_position_ids(positions);
        }
        Ok(input)
    }

    /// An encoder-decoder's input.
    pub(crate) fn seq2seq(&self, device: &Device) -> Result<Seq2SeqInput, String> {
        Ok(Seq2SeqInput {
            input_ids: self.ids::<2>("input_ids", device)?,
            attention_mask: self.padding_mask("attention_mask", false, device)?,
            decoder_input_ids: self.ids::<2>("decoder_input_ids", device)?,
            decoder_attention_mask: self.padding_mask("decoder_attention_mask", false, device)?,
            ..Default::default()
        })
    }

    /// Classification labels of `batch` rows and `classes` labels: class ids `[batch]`, or
    /// float targets `[batch, classes]` (regression or multi-label, by the config's
    /// `problem_type`).
    pub(crate) fn sequence_labels(&self, batch: usize, classes: usize, multi_label: bool, device: &Device) -> Result<Option<SequenceLabels>, String> {
        match self.tensors.get("labels").map(|t| t.ints.is_some()) {
            None => Ok(None),
            Some(true) => Ok(self.labels::<1>("labels", [batch], classes, true, device)?.map(SequenceLabels::SingleLabel)),
            Some(false) => {
                self.check_shape("labels", &[batch, classes])?;
                let targets = self.floats::<2>("labels", device)?;
                Ok(targets.map(if multi_label { SequenceLabels::MultiLabel } else { SequenceLabels::Regression }))
            }
        }
    }

    /// QA positions `[batch]`, when both are given: any value where the head clamps them (as
    /// transformers' do), else inside a sequence of length `within`.
    pub(crate) fn positions(&self, batch: usize, within: Option<usize>, device: &Device) -> Result<Option<(Tensor<1, Int>, Tensor<1, Int>)>, String> {
        let read = |name: &str| match within {
            Some(len) => self.labels::<1>(name, [batch], len, false, device),
            None => self.check_shape(name, &[batch]).and_then(|()| self.ids::<1>(name, device)),
        };
        Ok(read("start_positions")?.zip(read("end_positions")?))
    }

    /// For a multiple-choice head: `[batch, choices, seq]` inputs read as `[batch × choices,
    /// seq]` (choice-major within each example, as transformers flattens them); the number of
    /// choices.
    pub(crate) fn flatten_choices(&mut self) -> Result<usize, String> {
        let mut choices = None;
        for name in ["input_ids", "attention_mask", "token_type_ids", "position_ids"] {
            let Some(t) = self.tensors.get_mut(name) else { continue };
            let [b, c, s]: [usize; 3] = t.shape.clone().try_into().map_err(|_| format!("--inputs {}: `{name}` has shape {:?}; a multiple-choice head takes [batch, choices, seq]", self.file.display(), t.shape))?;
            if choices.is_some_and(|n| n != c) {
                return Err(format!("--inputs {}: `{name}` has {c} choices, the other inputs {}", self.file.display(), choices.unwrap_or(0)));
            }
            choices = Some(c);
            t.shape = vec![b * c, s];
        }
        choices.ok_or_else(|| format!("--inputs {}: no `input_ids`", self.file.display()))
    }

    /// Refuse inputs the head did not take.
    pub(crate) fn check_all_taken(&self, head: &str) -> Result<(), String> {
        let taken = self.taken.borrow();
        match self.tensors.keys().find(|k| !taken.contains(k)) {
            Some(name) => Err(format!("--inputs {}: `{name}` is not an input {head} takes (it takes {})", self.file.display(), taken.join(", "))),
            None => Ok(()),
        }
    }
}

/// The class to run: `--head`, else config.json's first architecture.
pub(crate) fn head_class(args: &ForwardArgs) -> Result<String, String> {
    if let Some(head) = &args.head {
        return Ok(head.clone());
    }
    let json = crate::common::config_json(&args.model)?;
    json["architectures"][0].as_str().map(str::to_string).ok_or_else(|| format!("{}: no `architectures`; give --head", args.model.join("config.json").display()))
}

/// Load `M` from `--model` onto `device`, reporting what loading did.
pub(crate) fn load<M: PretrainedModel>(args: &ForwardArgs, device: &Device) -> Result<(M, M::Config), String> {
    let loaded = M::from_pretrained(&args.model, device).map_err(|e| e.to_string())?;
    crate::common::report(&loaded.report);
    Ok((loaded.model, loaded.config))
}

/// Write `outputs` as float32 safetensors at `path`, atomically; refuse non-finite values.
pub(crate) fn write(outputs: Vec<NamedOutput>, path: &Path) -> Result<(), String> {
    let mut tensors = Vec::new();
    for (name, data) in outputs {
        // transformers' loss is a 0-d tensor.
        let shape = if name == "loss" { vec![] } else { data.shape().to_vec() };
        let values: Vec<f32> = data.convert::<f32>().try_to_vec::<f32>().map_err(|e| format!("`{name}`: {e:?}"))?;
        if values.iter().any(|v| !v.is_finite()) {
            return Err(format!("output `{name}` is not finite (NaN or infinite); the checkpoint overflows"));
        }
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        tensors.push((name, shape, bytes));
    }
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(n, shape, bytes)| (n.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), bytes).expect("consistent")))
        .collect();
    let bytes = safetensors::serialize(views, None).map_err(|e| e.to_string())?;
    sesame_layers::fs::write_atomic(path, &bytes).map_err(|e| format!("--out {}: {e}", path.display()))
}

pub(crate) fn options(args: &ForwardArgs) -> OutputOptions {
    if args.all_outputs {
        OutputOptions::all()
    } else {
        OutputOptions::default()
    }
}

pub(crate) fn bad_input(head: &str) -> impl Fn(InputError) -> String + '_ {
    move |e| format!("{head}: {e}")
}

/// Whether `dir/config.json` sets `problem_type` to multi-label classification.
pub(crate) fn multi_label(dir: &Path) -> Result<bool, String> {
    Ok(crate::common::config_json(dir)?["problem_type"] == "multi_label_classification")
}

/// Heads that only some encoder families have, beside the shared ones every family runs:
/// those a capability gives ([`PreTraining`] for a family with a sentence-pair head, `Backbone::SENTENCE_HEAD`) and a family's
/// own head models (BERT's next-sentence head, ELECTRA's discriminator). A tuple runs either.
pub trait ExtraHeads<B: Backbone> {
    /// The HF classes these heads are.
    fn classes() -> Vec<String>;
    /// The outputs of `head` when it is one of these heads, `None` otherwise.
    fn run(head: &str, args: &ForwardArgs, input: &EncoderInput, inputs: &Inputs, device: &Device) -> Option<Result<Vec<NamedOutput>, String>>;
}

impl<B: Backbone> ExtraHeads<B> for () {
    fn classes() -> Vec<String> {
        Vec::new()
    }

    fn run(_: &str, _: &ForwardArgs, _: &EncoderInput, _: &Inputs, _: &Device) -> Option<Result<Vec<NamedOutput>, String>> {
        None
    }
}

impl<B: Backbone, X: ExtraHeads<B>, Y: ExtraHeads<B>> ExtraHeads<B> for (X, Y) {
    fn classes() -> Vec<String> {
        [X::classes(), Y::classes()].concat()
    }

    fn run(head: &str, args: &ForwardArgs, input: &EncoderInput, inputs: &Inputs, device: &Device) -> Option<Result<Vec<NamedOutput>, String>> {
        X::run(head, args, input, inputs, device).or_else(|| Y::run(head, args, input, inputs, device))
    }
}

/// `…ForPreTraining`: masked LM and the sentence-pair head (BERT's NSP, ALBERT's SOP), with
/// `labels` and the sentence head's labels (`next_sentence_label`, `sentence_order_label`).
pub struct PreTraining;

impl<B: Backbone> ExtraHeads<B> for PreTraining {
    fn classes() -> Vec<String> {
        vec![format!("{}ForPreTraining", B::CLASS)]
    }

    fn run(head: &str, args: &ForwardArgs, input: &EncoderInput, inputs: &Inputs, device: &Device) -> Option<Result<Vec<NamedOutput>, String>> {
        (head == <Self as ExtraHeads<B>>::classes()[0]).then(|| {
            let names = const { SentenceHead::of::<B>() };
            let (m, c) = load::<ForPreTraining<B>>(args, device)?;
            input.validate(&c.input_limits()).map_err(bad_input(head))?;
            let [b, s] = input.input_ids.dims();
            let mlm = inputs.labels::<2>("labels", [b, s], c.input_limits().vocab_size, true, device)?;
            let labels = match (mlm, inputs.labels::<1>(names.labels, [b], 2, true, device)?) {
                (Some(mlm), Some(sentence)) => Some(PreTrainingLabels { mlm, sentence }),
                (None, None) => None,
                _ => return Err(format!("--inputs {}: {head} takes `labels` and `{}` together", args.inputs.display(), names.labels)),
            };
            Ok(m.forward(input.clone(), labels, options(args)).named(names.logits))
        })
    }
}

/// `forward` for an encoder family with base model `B`, sequence classifier `S` and
/// multiple-choice scorer `C`: its base model, masked LM, sequence and token classification,
/// multiple choice, QA and left-to-right heads, and the heads `H` only it has.
pub fn forward_encoder<B, S, C, H>(args: &ForwardArgs, device: &Device) -> Result<(), String>
where
    B: Backbone,
    S: SequenceHead<B>,
    C: SequenceHead<B>,
    H: ExtraHeads<B>,
{
    let head = head_class(args)?;
    let mut inputs = Inputs::read(&args.inputs)?;
    let class = |suffix: &str| format!("{}{suffix}", B::CLASS);
    let choices = if head == class("ForMultipleChoice") { Some(inputs.flatten_choices()?) } else { None };
    let input = inputs.encoder(device)?;
    let o = options(args);
    let check = |config: &B::Config| input.validate(&config.input_limits()).map_err(bad_input(&head));
    let [b, s] = input.input_ids.dims();
    let vocab = |config: &B::Config| config.input_limits().vocab_size;
    let num_labels = |config: &B::Config| B::classifier_sizes(config).num_labels;
    let outputs = if let Some(outputs) = H::run(&head, args, &input, &inputs, device) {
        outputs?
    } else if let (Some(choices), true) = (choices, head == class("ForMultipleChoice")) {
        let (m, c) = load::<ForMultipleChoice<B, C>>(args, device)?;
        check(&c)?;
        let labels = inputs.labels::<1>("labels", [b / choices], choices, true, device)?;
        m.forward(input, choices, labels, o).named()
    } else if head == class("Model") {
        let (m, c) = load::<B>(args, device)?;
        check(&c)?;
        m.forward(input, o).named()
    } else if head == class("ForMaskedLM") {
        let (m, c) = load::<ForMaskedLM<B>>(args, device)?;
        check(&c)?;
        let labels = inputs.labels::<2>("labels", [b, s], vocab(&c), true, device)?;
        m.forward(input, labels, o).named()
    } else if head == class("ForSequenceClassification") {
        let (m, c) = load::<ForSequenceClassification<B, S>>(args, device)?;
        check(&c)?;
        let labels = inputs.sequence_labels(b, num_labels(&c), multi_label(&args.model)?, device)?;
        m.forward(input, labels, o).named()
    } else if head == class("ForTokenClassification") {
        let (m, c) = load::<ForTokenClassification<B>>(args, device)?;
        check(&c)?;
        let labels = inputs.labels::<2>("labels", [b, s], num_labels(&c), true, device)?;
        m.forward(input, labels, o).named()
    } else if head == class("ForQuestionAnswering") {
        let (m, c) = load::<ForQuestionAnswering<B>>(args, device)?;
        check(&c)?;
        let positions = inputs.positions(b, None, device)?;
        m.forward(input, positions, o).named()
    } else if head == B::causal_lm_architecture() {
        let (m, c) = load::<ForCausalLM<B>>(args, device)?;
        check(&c)?;
        let labels = inputs.labels::<2>("labels", [b, s], vocab(&c), true, device)?;
        m.forward(input, labels, o).named()
    } else {
        let mut runs = vec![class("Model"), class("ForMaskedLM"), class("ForSequenceClassification"), class("ForTokenClassification"), class("ForMultipleChoice"), class("ForQuestionAnswering"), B::causal_lm_architecture()];
        runs.extend(H::classes());
        return Err(format!("--head {head}: not a head of this family (forward runs {})", runs.join(", ")));
    };
    inputs.check_all_taken(&head)?;
    write(outputs, &args.out)
}

