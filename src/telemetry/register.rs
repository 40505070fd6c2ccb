//! One way to register a set of fixed series: a table of name, help and handle.
//!
//! A metrics struct keeps its series' handles and gives the registry a clone of each (the
//! handles share their atomics). Declared with [`series_set!`], each series is written once,
//! field, type, name and help together, and registering the struct walks that table; a set
//! that is no struct of its own (the tracing counters) calls [`register_all`] with its rows.

use prometheus_client::registry::{Metric, Registry};

/// A series handle the registry can take a clone of, whatever its metric type.
pub(crate) trait Series {
    fn register_as(&self, registry: &mut Registry, name: &str, help: &str);
}

impl<M: Metric + Clone> Series for M {
    fn register_as(&self, registry: &mut Registry, name: &str, help: &str) {
        registry.register(name, help, self.clone());
    }
}

/// One series: its name (under the registry's prefix), its help, its handle.
pub(crate) type SeriesRow<'a> = (&'static str, &'static str, &'a dyn Series);

/// Registers every row in order.
pub(crate) fn register_all(registry: &mut Registry, rows: &[SeriesRow<'_>]) {
    for (name, help, handle) in rows {
        handle.register_as(registry, name, help);
    }
}

/// A struct of series handles, created empty and registered from its table once.
pub(crate) trait SeriesSet: Default {
    /// Every series of the set, in the order the exposition lists them.
    fn series(&self) -> Vec<SeriesRow<'_>>;

    fn register(registry: &mut Registry) -> Self {
        let set = Self::default();
        register_all(registry, &set.series());
        set
    }
}

/// A struct of series handles and its [`SeriesSet`] table from one declaration per series:
/// the field, its metric type, the series' name and its help, so a field cannot be left out
/// of the table or registered under another's name.
macro_rules! series_set {
    (
        $(#[$meta:meta])*
        $vis:vis struct $set:ident {
            $(
                $(#[$field_meta:meta])*
                $field:ident: $metric:ty => $name:literal, $help:literal;
            )+
        }
    ) => {
        $(#[$meta])*
        $vis struct $set {
            $(
                $(#[$field_meta])*
                $field: $metric,
            )+
        }

        impl $crate::telemetry::register::SeriesSet for $set {
            fn series(&self) -> Vec<$crate::telemetry::register::SeriesRow<'_>> {
                vec![$(($name, $help, &self.$field)),+]
            }
        }
    };
}

pub(crate) use series_set;
