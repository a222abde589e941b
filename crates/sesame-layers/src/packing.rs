//! Padding removed from the dense blocks (TEI's and FlashAttention's "varlen" layout): a
//! padded batch's tokens are packed into one row, the projections, feed-forward blocks,
//! LayerNorms and dropout run over the tokens alone, and only the attention scores are
//! computed on the padded layout. Every token's output is what the padded run computes; the
//! outputs at padding positions are zeros instead.
//!
//! A batch of random sentences is about a third padding (verse pairs of 5–24 words, 32 to a
//! batch, all-MiniLM-L6-v2's tokenizer: 64% tokens), so this saves about a third of a layer's
//! products where nothing reads the padding positions: pooled embeddings, a classifier reading
//! the first token, a tagger's logits (cut to the tokens), and training any of them.

use burn::prelude::*;

/// Where the tokens of a padded batch `[batch, seq]` lie: the packed layout `[1, tokens, d]`
/// holds them row after row, in order.
#[derive(Clone, Debug)]
pub struct Packing {
    /// Each token's position in the flattened batch `[tokens]` (`row · seq + column`).
    tokens: Tensor<1, Int>,
    /// Each position of the flattened batch: its token's index in the packed layout, or
    /// `tokens` (a row of zeros) for padding `[batch · seq]`.
    positions: Tensor<1, Int>,
    batch: usize,
    seq: usize,
    count: usize,
}

impl Packing {
    /// The packing of `attention_mask` `[batch, seq]` (1 = token, 0 = padding; read back from
    /// the device); `None` when the batch holds no padding, where packing saves nothing, or no
    /// token at all (left padded, as it came).
    pub fn of(attention_mask: &Tensor<2, Int>) -> Option<Self> {
        let [batch, seq] = attention_mask.dims();
        let mask: Vec<i64> = attention_mask.to_data().convert::<i64>().try_to_vec().ok()?;
        let tokens: Vec<i64> = (0..batch * seq).filter(|&i| mask[i] != 0).map(|i| i as i64).collect();
        let count = tokens.len();
        if count == batch * seq || count == 0 {
            return None;
        }
        let mut positions = vec![count as i64; batch * seq];
        for (packed, &i) in tokens.iter().enumerate() {
            positions[i as usize] = packed as i64;
        }
        let device = attention_mask.device();
        let index = |values: Vec<i64>| {
            let n = values.len();
            Tensor::<1, Int>::from_data(TensorData::new(values, [n]), &device)
        };
        Some(Self { tokens: index(tokens), positions: index(positions), batch, seq, count })
    }

    /// The padded batch's `[batch, seq]`.
    pub fn batch_shape(&self) -> [usize; 2] {
        [self.batch, self.seq]
    }

    /// `x` `[batch, seq, d]` packed: its tokens `[1, tokens, d]`.
    pub fn pack(&self, x: Tensor<3>) -> Tensor<3> {
        let d = x.dims()[2];
        x.reshape([self.batch * self.seq, d]).select(0, self.tokens.clone()).reshape([1, self.count, d])
    }

    /// Packed tokens `x` `[1, tokens, d]` laid out again as the batch `[batch, seq, d]`, zeros
    /// at the padding positions.
    pub fn unpack(&self, x: Tensor<3>) -> Tensor<3> {
        let d = x.dims()[2];
        let zeros = Tensor::<2>::zeros([1, d], &x.device());
        Tensor::cat(vec![x.reshape([self.count, d]), zeros], 0).select(0, self.positions.clone()).reshape([self.batch, self.seq, d])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_keeps_the_tokens_in_order_and_unpacking_puts_zeros_at_the_padding() {
        let device = Device::default();
        let mask = Tensor::<2, Int>::from_data(TensorData::new(vec![1i64, 1, 0, 1, 0, 0], [2, 3]), &device);
        let x = Tensor::<1, Int>::arange(0..6, &device).float().reshape([2, 3, 1]);
        let packing = Packing::of(&mask).expect("the batch holds padding");
        let packed = packing.pack(x);
        assert_eq!(packed.to_data().try_to_vec::<f32>().unwrap(), vec![0.0, 1.0, 3.0]);
        assert_eq!(packing.unpack(packed).to_data().try_to_vec::<f32>().unwrap(), vec![0.0, 1.0, 0.0, 3.0, 0.0, 0.0]);
        let full = Tensor::<2, Int>::ones([2, 3], &device);
        assert!(Packing::of(&full).is_none(), "a batch without padding is left as it is");
        let empty = Tensor::<2, Int>::zeros([2, 3], &device);
        assert!(Packing::of(&empty).is_none(), "a batch without tokens is left as it is");
    }
}
