//! UniLM's model is BERT's (Dong et al. 2019): one shared Transformer whose self-attention
//! mask decides what each token may see, and so which language model it is. The masks are
//! given to BERT's forward pass as the input's attention restriction.

use burn::prelude::*;
use sesame_bert::BertLikeModel;
use sesame_layers::EncoderInput;

use crate::config::{token_types, Unilm};

/// The UniLM encoder: BERT's (HF `BertModel`) with UniLM's configuration.
pub type UnilmModel = BertLikeModel<Unilm>;

/// The four self-attention masks of UniLM (figure 1 of the paper).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnilmMask {
    /// Every token sees every token (BERT's masked LM).
    Bidirectional,
    /// A token sees itself and the tokens before it.
    LeftToRight,
    /// A token sees itself and the tokens after it.
    RightToLeft,
    /// The source, the first `source_len[row]` tokens of each row (`[CLS] S1 [SEP]`), sees
    /// itself bidirectionally; a target token sees the source, itself and the target before it.
    SeqToSeq {
        /// Source length of each row.
        source_len: Vec<usize>,
    },
}

impl UnilmMask {
    /// The restriction `[batch, q, past + q]` (`true` = may not attend) for queries at
    /// positions `past..past + q` over keys `0..past + q`; `None` for [`UnilmMask::Bidirectional`].
    pub fn restriction(&self, batch: usize, past: usize, q: usize, device: &Device) -> Option<Tensor<3, Bool>> {
        let k = past + q;
        let blocked = |row: usize, i: usize, j: usize| -> bool {
            match self {
                UnilmMask::Bidirectional => false,
                UnilmMask::LeftToRight => j > i,
                UnilmMask::RightToLeft => j < i,
                UnilmMask::SeqToSeq { source_len } => {
                    let source = source_len.get(row).copied().unwrap_or(0);
                    j >= source && (i < source || j > i)
                }
            }
        };
        if *self == UnilmMask::Bidirectional {
            return None;
        }
        let values: Vec<i32> =
            (0..batch * q * k).map(|n| i32::from(blocked(n / (q * k), past + (n / k) % q, n % k))).collect();
        // Built as integers and compared on the device: boolean data does not upload to every
        // backend (CubeCL stores bools as u32).
        Some(Tensor::<3, Int>::from_data(TensorData::new(values, [batch, q, k]), device).equal_elem(1))
    }

    /// `input` run under this mask (its restriction set; a cache in `input` places the
    /// queries after the cached positions).
    pub fn apply(&self, input: EncoderInput) -> EncoderInput {
        let [batch, q] = input.input_ids.dims();
        match self.restriction(batch, input.past_len(), q, &input.input_ids.device()) {
            Some(restriction) => input.with_attention_restriction(restriction),
            None => input,
        }
    }

    /// The token-type ids UniLM v1 gives this objective for rows whose first segment ends at
    /// `first_len[row]` (`[batch, seq]`): 0/1 bidirectional, 2 left-to-right, 3 right-to-left,
    /// 4/5 source/target (`new_segment_ids`).
    pub fn token_type_ids(&self, first_len: &[usize], seq: usize, device: &Device) -> Tensor<2, Int> {
        let (a, b) = match self {
            UnilmMask::Bidirectional => (token_types::BIDIRECTIONAL[0], token_types::BIDIRECTIONAL[1]),
            UnilmMask::LeftToRight => (token_types::LEFT_TO_RIGHT, token_types::LEFT_TO_RIGHT),
            UnilmMask::RightToLeft => (token_types::RIGHT_TO_LEFT, token_types::RIGHT_TO_LEFT),
            UnilmMask::SeqToSeq { .. } => (token_types::SEQ_TO_SEQ[0], token_types::SEQ_TO_SEQ[1]),
        };
        let values: Vec<i64> = first_len.iter().flat_map(|&n| (0..seq).map(move |j| if j < n { a } else { b })).collect();
        Tensor::from_data(TensorData::new(values, [first_len.len(), seq]), device)
    }
}
