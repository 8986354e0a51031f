//! What a majority of values vouches for: the order statistics the clock rules take over one
//! value per voter, of which at most a minority may be wrong (issue 42).

/// How many of `voters` make a majority.
pub fn majority(voters: usize) -> usize {
    voters / 2 + 1
}

/// The largest value that a majority of `voters` reaches: the majority-th largest of `values`,
/// which hold one value per voter (the caller stands in for those it has none of). With a
/// minority wrong, at least one right value is at least this, and one at most this.
pub fn vouched<T: PartialOrd + Copy>(mut values: Vec<T>, voters: usize) -> Option<T> {
    let k = majority(voters);
    values.sort_by(|a, b| b.partial_cmp(a).unwrap_or(std::cmp::Ordering::Equal));
    values.get(k - 1).copied()
}

/// The smallest value that a majority of `voters` stays within: the majority-th smallest.
pub fn vouched_below<T: PartialOrd + Copy>(mut values: Vec<T>, voters: usize) -> Option<T> {
    let k = majority(voters);
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    values.get(k - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_wrong_value_of_three_and_two_of_five_move_nothing_past_a_right_one() {
        // Right values are 10; the wrong ones 99 or 0.
        assert_eq!(vouched(vec![99, 10, 10], 3), Some(10));
        assert_eq!(vouched(vec![0, 10, 10], 3), Some(10));
        assert_eq!(vouched(vec![99, 99, 10, 10, 10], 5), Some(10));
        assert_eq!(vouched(vec![0, 0, 10, 10, 10], 5), Some(10));
        assert_eq!(vouched_below(vec![99, 10, 10], 3), Some(10));
        assert_eq!(vouched_below(vec![0, 0, 10, 10, 10], 5), Some(10));
        assert_eq!(
            vouched(vec![5], 3),
            None,
            "one value cannot vouch for three"
        );
        assert_eq!(vouched(vec![7], 1), Some(7));
    }
}
