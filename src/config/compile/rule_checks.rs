//! One descriptor's `rate_limit` or `rate_limits` checked into its rule: the unit, the count,
//! `unlimited`, `name` and `replaces`, the windows of a list, and the rule added to the domain
//! in config order.

use super::*;

impl Compiler<'_> {
    /// Checks a `rate_limit` block; the rule, or `None` if it is invalid.
    pub(super) fn rule(
        &mut self,
        spanned: &Spanned<RawRateLimit>,
        descriptor: &RawDescriptor,
        at: &RulePlace<'_>,
    ) -> Option<Arc<Rule>> {
        let descriptor_place = at.descriptor_place;
        let place = format!("{descriptor_place}.rate_limit");
        let line = line_of(spanned);
        let raw = &spanned.value;

        let limit = if raw.unlimited.as_ref().is_some_and(|u| u.value) {
            self.unlimited(raw, &place)
        } else {
            self.limited(raw, &place, line)
        };

        // As upstream: an empty name is no name.
        let name = raw
            .name
            .as_ref()
            .map(|n| n.value.as_str())
            .filter(|n| !n.is_empty());
        let mut replaces = Vec::new();
        let mut replaces_ok = true;
        for (j, entry) in raw.replaces.iter().flatten().enumerate() {
            let entry_place = format!("{place}.replaces[{j}]");
            match &entry.value.name {
                None => {
                    self.error(line_of(entry), &entry_place, "missing `name` in `replaces`");
                    replaces_ok = false;
                }
                Some(n) if n.value.is_empty() => {
                    self.error(
                        line_of(n),
                        &format!("{entry_place}.name"),
                        "empty `name` in `replaces`",
                    );
                    replaces_ok = false;
                }
                Some(n) if Some(n.value.as_str()) == name => {
                    self.error(
                        line_of(n),
                        &format!("{entry_place}.name"),
                        format!(
                            "a rule cannot replace itself: `{}` is this rule's own `name`",
                            n.value
                        ),
                    );
                    replaces_ok = false;
                }
                Some(n) => replaces.push(Arc::from(n.value.as_str())),
            }
        }

        let penalty_ms = match &raw.penalty {
            None => Some(0),
            Some(penalty) if limit == Some(RuleLimit::Unlimited) => {
                self.error(
                    line_of(penalty),
                    &format!("{place}.penalty"),
                    "`unlimited: true` must not be combined with `penalty`",
                );
                None
            }
            Some(penalty) => match crate::config::penalty::parse(&penalty.value) {
                Ok(ms) => Some(ms),
                Err(problem) => {
                    self.error(line_of(penalty), &format!("{place}.penalty"), problem);
                    None
                }
            },
        };
        let guarantee = match &raw.guarantee {
            Some(guarantee) if limit == Some(RuleLimit::Unlimited) => {
                self.error(
                    line_of(guarantee),
                    &format!("{place}.guarantee"),
                    "`unlimited: true` must not be combined with `guarantee`",
                );
                None
            }
            guarantee => self.guarantee(guarantee.as_ref(), &place),
        };
        let (limit, penalty_ms, guarantee) = (limit?, penalty_ms?, guarantee?);
        if !replaces_ok {
            return None;
        }
        Some(self.add_rule(
            descriptor,
            at,
            RuleLimits {
                limit,
                more_limits: Box::new([]),
                name: name.map(Arc::from),
                replaces: replaces.into_boxed_slice(),
                penalty_ms,
                guarantee,
            },
        ))
    }

    /// Checks a `rate_limits` list (our extension): 1 to [`MAX_LIMITS_PER_DESCRIPTOR`]
    /// limits, each with `unit` and `requests_per_unit` (and optionally `unit_multiplier`),
    /// no two with the same window (they would share a counter). `name`, `replaces` and
    /// `unlimited` belong to the descriptor's rule, not to one of its limits: refused there.
    pub(super) fn rule_list(
        &mut self,
        list: &Spanned<Vec<Spanned<RawRateLimit>>>,
        descriptor: &RawDescriptor,
        at: &RulePlace<'_>,
    ) -> Option<Arc<Rule>> {
        let place = format!("{}.rate_limits", at.descriptor_place);
        if list.value.is_empty() {
            self.error(line_of(list), &place, "`rate_limits` is empty");
            return None;
        }
        if list.value.len() > MAX_LIMITS_PER_DESCRIPTOR {
            self.error(
                line_of(list),
                &place,
                format!(
                    "`rate_limits` holds {} limits; at most {MAX_LIMITS_PER_DESCRIPTOR}",
                    list.value.len()
                ),
            );
            return None;
        }
        let mut limits = Vec::with_capacity(list.value.len());
        let mut windows: Vec<(u64, String, Option<usize>)> = Vec::new();
        let mut penalty_ms = 0;
        // Every entry's guarantee, which must be one (the limits of a descriptor are decided
        // together, all-or-nothing): the first entry's, with its place.
        let mut guarantee: Option<(Guarantee, String)> = None;
        let mut ok = true;
        for (j, spanned) in list.value.iter().enumerate() {
            let entry_place = format!("{place}[{j}]");
            let line = line_of(spanned);
            let raw = &spanned.value;
            let refused = [
                (
                    "unlimited",
                    raw.unlimited.is_some(),
                    raw.unlimited.as_ref().and_then(line_of),
                ),
                (
                    "name",
                    raw.name.is_some(),
                    raw.name.as_ref().and_then(line_of),
                ),
                ("replaces", raw.replaces.is_some(), None),
            ];
            let mut entry_ok = true;
            for (field, present, field_line) in refused {
                if present {
                    self.error(
                        field_line.or(line),
                        &format!("{entry_place}.{field}"),
                        format!(
                            "`{field}` is not supported in a `rate_limits` entry (it belongs \
                             to the whole descriptor); use `rate_limit` for it"
                        ),
                    );
                    entry_ok = false;
                }
            }
            // A `penalty` on any entry holds the descriptor's client: the longest one wins.
            if let Some(penalty) = &raw.penalty {
                match crate::config::penalty::parse(&penalty.value) {
                    Ok(ms) => penalty_ms = penalty_ms.max(ms),
                    Err(problem) => {
                        self.error(line_of(penalty), &format!("{entry_place}.penalty"), problem);
                        entry_ok = false;
                    }
                }
            }
            match self.guarantee(raw.guarantee.as_ref(), &entry_place) {
                None => entry_ok = false,
                Some(this) => match &guarantee {
                    None => guarantee = Some((this, entry_place.clone())),
                    Some((first, first_place)) if *first != this => {
                        let field_line = raw.guarantee.as_ref().and_then(line_of);
                        self.error(
                            field_line.or(line),
                            &format!("{entry_place}.guarantee"),
                            format!(
                                "every entry of `rate_limits` must have the same guarantee: \
                                 this one is `{this}`, {first_place} `{first}` (`never_below` \
                                 when not given)"
                            ),
                        );
                        entry_ok = false;
                    }
                    Some(_) => {}
                },
            }
            if !entry_ok {
                ok = false;
                continue;
            }
            let Some(limit) = self.limited(raw, &entry_place, line) else {
                ok = false;
                continue;
            };
            let RuleLimit::Limited {
                unit,
                unit_multiplier,
                ..
            } = limit
            else {
                continue;
            };
            let window = window_ms(unit, unit_multiplier).unwrap_or(u64::MAX);
            if let Some((_, first_place, first_line)) = windows.iter().find(|w| w.0 == window) {
                let at = match first_line {
                    Some(l) => format!("{first_place} (line {l})"),
                    None => first_place.clone(),
                };
                self.error(
                    line,
                    &entry_place,
                    format!(
                        "two limits with the same window ({unit_multiplier} × {unit}) in \
                         `rate_limits`; the other is at {at}: keep one (the smaller)"
                    ),
                );
                ok = false;
                continue;
            }
            windows.push((window, entry_place, line));
            limits.push(limit);
        }
        if !ok {
            return None;
        }
        let mut limits = limits.into_iter();
        let limit = limits.next()?;
        Some(self.add_rule(
            descriptor,
            at,
            RuleLimits {
                limit,
                more_limits: limits.collect(),
                name: None,
                replaces: Box::new([]),
                penalty_ms,
                guarantee: guarantee.map_or(Guarantee::NeverBelow, |(g, _)| g),
            },
        ))
    }

    /// The rule of `descriptor` at `at` with `limits` (from `rate_limit` or `rate_limits`),
    /// added to the domain's rules in config order.
    fn add_rule(
        &mut self,
        descriptor: &RawDescriptor,
        at: &RulePlace<'_>,
        limits: RuleLimits,
    ) -> Arc<Rule> {
        let rule = Arc::new(Rule {
            scope: Scope::new(Arc::clone(&self.domain), at.namespace),
            limit: limits.limit,
            more_limits: limits.more_limits,
            name: limits.name,
            replaces: limits.replaces,
            shadow_mode: descriptor.shadow_mode.unwrap_or(false),
            quota_mode: descriptor.quota_mode.unwrap_or(false),
            metadata: descriptor
                .metadata
                .as_ref()
                .filter(|m| !m.is_empty())
                .map(|m| Arc::new(m.clone())),
            detailed_metric: descriptor.detailed_metric.unwrap_or(false),
            value_to_metric: at.value_to_metric,
            penalty_ms: limits.penalty_ms,
            guarantee: limits.guarantee,
            path: at.path.into(),
            series: RuleSeries::default(),
            place: Place::new(Arc::clone(&self.shared_file), at.line),
        });
        self.rules.push(Arc::clone(&rule));
        rule
    }

    /// A limit's `guarantee` at `place` (its block or list entry): the default when absent;
    /// `None` (reported) when unknown.
    fn guarantee(&mut self, field: Option<&Spanned<String>>, place: &str) -> Option<Guarantee> {
        let Some(field) = field else {
            return Some(Guarantee::NeverBelow);
        };
        let at = format!("{place}.guarantee");
        match Guarantee::parse(&field.value) {
            Err(problem) => {
                self.error(line_of(field), &at, problem);
                None
            }
            Ok(guarantee) => Some(guarantee),
        }
    }

    fn unlimited(&mut self, raw: &RawRateLimit, place: &str) -> Option<RuleLimit> {
        // The fields that give a window, which an unlimited rule has none of (with their line
        // when present).
        let window_fields = [
            ("unit", raw.unit.as_ref().map(line_of)),
            ("unit_multiplier", raw.unit_multiplier.as_ref().map(line_of)),
        ];
        let mut ok = true;
        for (field, line) in window_fields {
            if let Some(line) = line {
                self.error(
                    line,
                    &format!("{place}.{field}"),
                    format!("`unlimited: true` must not be combined with `{field}`"),
                );
                ok = false;
            }
        }
        // `requests_per_unit` is ignored, as upstream does.
        ok.then_some(RuleLimit::Unlimited)
    }

    fn limited(
        &mut self,
        raw: &RawRateLimit,
        place: &str,
        line: Option<usize>,
    ) -> Option<RuleLimit> {
        let unit = match &raw.unit {
            None => {
                self.error(
                    line,
                    place,
                    format!("missing `unit` ({UNITS}), or `unlimited: true`"),
                );
                None
            }
            Some(u) => {
                let unit = Unit::parse(&u.value);
                if unit.is_none() {
                    self.error(
                        line_of(u),
                        &format!("{place}.unit"),
                        format!("unknown unit `{}`; expected {UNITS}", u.value),
                    );
                }
                unit
            }
        };
        // Upstream silently reads a missing value as 0 (always over): make
        // that choice explicit.
        let requests_per_unit = match &raw.requests_per_unit {
            None => {
                self.error(
                    line,
                    place,
                    "missing `requests_per_unit`; write `requests_per_unit: 0` explicitly \
                     for a limit that is always over",
                );
                None
            }
            Some(r) => Some(r.value),
        };
        let unit_multiplier = match &raw.unit_multiplier {
            None => Some(1),
            Some(m) if m.value == 0 => {
                self.error(
                    line_of(m),
                    &format!("{place}.unit_multiplier"),
                    "`unit_multiplier` must be at least 1",
                );
                None
            }
            Some(m) => Some(m.value),
        };
        let (unit, requests_per_unit, unit_multiplier) =
            (unit?, requests_per_unit?, unit_multiplier?);
        if window_ms(unit, unit_multiplier).is_none() {
            let multiplier_line = raw.unit_multiplier.as_ref().and_then(line_of);
            self.error(
                multiplier_line,
                &format!("{place}.unit_multiplier"),
                format!(
                    "a window of {unit_multiplier} × {unit} is too long to count in milliseconds"
                ),
            );
            return None;
        }
        Some(RuleLimit::Limited {
            requests_per_unit,
            unit,
            unit_multiplier,
        })
    }
}
