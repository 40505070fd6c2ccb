//! The budget of one window cell of a bounded counter, and its fair division.
//!
//! A single process deciding alone admits a request of cost 1 in cell `s` at `elapsed` ms
//! when `current + ⌊previous × (window − elapsed) ÷ window⌋ + 1 ≤ limit`. So the cell may
//! hold at most [`budget`] admissions by `elapsed`: the limit less the previous cell's
//! weight. The budget only grows within the cell (the weight decays), from
//! `limit − previous` at its start to `limit` at its end: rights cut from it at one instant
//! stay within it at every later instant of the cell.

/// A share of a cell's growth is `share ÷ SHARE_UNITS` of it.
pub const SHARE_UNITS: u64 = 1 << 20;

/// The most a cell may hold by `elapsed_ms` when the previous cell held at most `previous`.
pub fn budget(limit: u64, previous: u64, window_ms: u64, elapsed_ms: u64) -> u64 {
    let window = u128::from(window_ms.max(1));
    let left = window - u128::from(elapsed_ms).min(window);
    let weight = u128::from(previous) * left / window;
    u128::from(limit).saturating_sub(weight) as u64
}

/// Rights of a cell that vest as its budget grows between two instants of the cell (ms after
/// its start): all of them by `to_ms`.
///
/// Each right vests at a unit of the stretch's growth of its own (`vests_at`, 1 = the first
/// unit), distinct among the holders sharing the stretch ([`interleave`]): together they
/// never vest more than the budget grew, and each holder's rights are spread over the
/// stretch rather than each holder's last right vesting at its very end, where no request of
/// the holder may come to spend it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub vests_at: Vec<u64>,
    pub from_ms: u64,
    pub to_ms: u64,
}

impl Segment {
    pub fn rights(&self) -> u64 {
        self.vests_at.len() as u64
    }
}

/// What `segments` have vested by `elapsed_ms` of a cell whose budget is
/// [`budget`]`(limit, previous, window_ms, ·)`.
pub fn vested(
    segments: &[Segment],
    limit: u64,
    previous: u64,
    window_ms: u64,
    elapsed_ms: u64,
) -> u64 {
    let at = |ms: u64| budget(limit, previous, window_ms, ms);
    segments
        .iter()
        .map(|s| {
            if elapsed_ms >= s.to_ms {
                return s.rights();
            }
            if elapsed_ms < s.from_ms {
                return 0;
            }
            let grown = at(elapsed_ms) - at(s.from_ms);
            s.vests_at.partition_point(|&unit| unit <= grown) as u64
        })
        .sum()
}

/// The units of a stretch's growth (`1..=Σ rights`) at which each holder's rights vest:
/// holder `i`'s `j`-th right is placed at `(j + ½) ÷ rights[i]` of the stretch, and the
/// units are handed out in that order, so every unit goes to one right and each holder's
/// rights are spread evenly over the stretch, interleaved with the others'.
pub fn interleave(rights: &[u64]) -> Vec<Vec<u64>> {
    let mut order: Vec<(u64, u64, usize)> = rights
        .iter()
        .enumerate()
        .flat_map(|(holder, &count)| (0..count).map(move |j| (2 * j + 1, 2 * count, holder)))
        .collect();
    // (2j + 1) ÷ 2count ascending, compared without division; ties by holder.
    order.sort_by(|&(a, b, x), &(c, d, y)| {
        (u128::from(a) * u128::from(d))
            .cmp(&(u128::from(c) * u128::from(b)))
            .then(x.cmp(&y))
    });
    let mut units = vec![Vec::new(); rights.len()];
    for (unit, &(_, _, holder)) in (1u64..).zip(&order) {
        if let Some(held) = units.get_mut(holder) {
            held.push(unit);
        }
    }
    units
}

/// `total` split in proportion to `weights`, in whole parts that sum to `total` (the largest
/// remainders round up); evenly when every weight is 0.
pub fn split(total: u64, weights: &[u64]) -> Vec<u64> {
    let n = weights.len() as u128;
    if n == 0 {
        return Vec::new();
    }
    let sum: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    let weight = |w: u64| if sum == 0 { 1 } else { u128::from(w) };
    let whole = if sum == 0 { n } else { sum };
    let total_wide = u128::from(total);
    let mut parts: Vec<(u128, u128)> = weights
        .iter()
        .map(|&w| {
            let exact = total_wide * weight(w);
            (exact / whole, exact % whole)
        })
        .collect();
    let mut left = total_wide - parts.iter().map(|&(p, _)| p).sum::<u128>();
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(parts.get(i).map_or(0, |&(_, r)| r)));
    for i in order {
        if left == 0 {
            break;
        }
        if let Some(part) = parts.get_mut(i) {
            part.0 += 1;
            left -= 1;
        }
    }
    parts
        .into_iter()
        .map(|(p, _)| u64::try_from(p).unwrap_or(u64::MAX))
        .collect()
}

/// Max-min fair shares of [`SHARE_UNITS`] among `demands` (each in shares: what it would use
/// of the whole): the smallest demands are met first, the rest split evenly among the larger;
/// what is left once every demand is met goes evenly to those with any demand, or to all
/// when no one demands anything. The shares never sum above [`SHARE_UNITS`].
///
/// The spare goes evenly, not in proportion to demand: a counter far below its limit is
/// mostly spare, and its next requests come from any region that uses it, not mostly from
/// the one that happened to send the most since its last exchange (`zipf`, seed 1: 6.05 %
/// refused against the ideal with the spare by demand, 1.35 % evenly).
pub fn max_min(demands: &[f64]) -> Vec<u64> {
    let n = demands.len();
    if n == 0 {
        return Vec::new();
    }
    let total = SHARE_UNITS as f64;
    let wanted: Vec<f64> = demands.iter().map(|d| d.max(0.0)).collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (wanted.get(a), wanted.get(b));
        x.partial_cmp(&y).unwrap_or(std::cmp::Ordering::Equal)
    });
    let mut given = vec![0.0; n];
    let mut left = total;
    for (i, &who) in order.iter().enumerate() {
        let fair = left / (n - i) as f64;
        let give = wanted.get(who).copied().unwrap_or(0.0).min(fair);
        if let Some(slot) = given.get_mut(who) {
            *slot = give;
        }
        left -= give;
    }
    let demanding = wanted.iter().filter(|&&want| want > 0.0).count();
    for (slot, want) in given.iter_mut().zip(&wanted) {
        *slot += if demanding == 0 {
            left / n as f64
        } else if *want > 0.0 {
            left / demanding as f64
        } else {
            0.0
        };
    }
    let mut shares: Vec<u64> = given.iter().map(|g| g.max(0.0).floor() as u64).collect();
    // Floating-point sums may land a unit over: take it from the largest share.
    while shares.iter().sum::<u64>() > SHARE_UNITS {
        match shares.iter_mut().max() {
            Some(largest) if *largest > 0 => *largest -= 1,
            _ => break,
        }
    }
    shares
}

/// Takes `part` of the spare (the shares beyond every demand, when all are met) off `shares`
/// and returns it in share units: the ledger's reserve. It comes off the spare as
/// [`max_min`] gave it (evenly from those with demand, or from all when no one demands), so
/// what meets a demand is never cut, and a contended counter (no spare) keeps no reserve.
pub fn reserve_of_spare(shares: &mut [u64], demands: &[f64], part: f64) -> u64 {
    let demanded: f64 = demands.iter().map(|d| d.max(0.0)).sum();
    let spare = SHARE_UNITS as f64 - demanded;
    if spare <= 0.0 || shares.is_empty() {
        return 0;
    }
    let demanding = demands.iter().filter(|&&d| d > 0.0).count();
    let givers = if demanding == 0 {
        shares.len()
    } else {
        demanding
    };
    let cut = (spare * part.clamp(0.0, 1.0) / givers as f64).floor() as u64;
    let mut reserve = 0;
    for (share, &demand) in shares.iter_mut().zip(demands) {
        if demanding == 0 || demand > 0.0 {
            let taken = cut.min(*share);
            *share -= taken;
            reserve += taken;
        }
    }
    reserve
}

#[cfg(test)]
mod tests;
