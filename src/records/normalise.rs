//! What a writer of records does with a value its readers would refuse:
//! the record is written all the same, the value made unknown (or, for a
//! field every record has, `-`) and the change named, so one odd value
//! from a route or a client never blocks the records after it. The rules
//! are the readers' own ([`super::read::check_values`]).

use std::borrow::Cow;

use super::read::check_values;
use super::record::Record;
use super::schema::RECORD_COLUMNS;
use super::schema::field::*;

/// One value of a record made readable: the field and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Normalised {
    pub field: &'static str,
    pub problem: String,
}

/// Makes `record` pass every check its readers make, changing only the
/// values that fail; what it changed, in the order it found them.
pub fn normalise(record: &mut Record<'_>) -> Vec<Normalised> {
    let mut changed = Vec::new();
    // Each pass clears the field that failed, so the checks end within
    // one pass a field.
    for _ in 0..RECORD_COLUMNS.len() {
        let Err((index, problem)) = check_values(record) else {
            break;
        };
        clear(record, index);
        changed.push(Normalised {
            field: RECORD_COLUMNS[index].name,
            problem,
        });
    }
    changed
}

fn clear(record: &mut Record<'_>, index: usize) {
    match index {
        ID => record.id = Cow::Borrowed("-"),
        SLICE => record.slice = Cow::Borrowed("-"),
        ROUTE => record.route = Cow::Borrowed("-"),
        SCORE => record.score = None,
        PROPENSITY => record.propensity = None,
        INPUT_TOKENS => record.input_tokens = None,
        CACHED_INPUT_TOKENS => record.cached_input_tokens = None,
        OUTPUT_TOKENS => record.output_tokens = None,
        TTFT_MS => record.ttft_ms = None,
        TOTAL_MS => record.total_ms = None,
        COST_USD => record.cost_usd = None,
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Status;

    fn record() -> Record<'static> {
        Record::new(
            "r-1".to_owned(),
            1,
            "billing".to_owned(),
            "small".to_owned(),
            Status::Ok,
        )
    }

    #[test]
    fn a_cost_past_any_price_is_made_unknown() {
        let mut absurd = record();
        absurd.cost_usd = Some(1e308);
        let changed = normalise(&mut absurd);
        assert_eq!(absurd.cost_usd, None);
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].field, "cost_usd");
        assert!(changed[0].problem.contains("1e6"), "{}", changed[0].problem);
    }

    #[test]
    fn a_record_its_readers_take_is_left_as_it_is() {
        let mut fine = record();
        fine.input_tokens = Some(10);
        fine.cached_input_tokens = Some(10);
        fine.ttft_ms = Some(1.0);
        fine.total_ms = Some(2.0);
        assert!(normalise(&mut fine).is_empty());
        assert_eq!(fine.input_tokens, Some(10));
    }

    #[test]
    fn every_value_a_reader_refuses_is_made_unknown_and_named() {
        let mut odd = record();
        odd.slice = Cow::Borrowed(" ");
        odd.input_tokens = Some(u64::MAX);
        odd.cached_input_tokens = Some(5);
        odd.score = Some(f64::NAN);
        odd.ttft_ms = Some(9.0);
        odd.total_ms = Some(3.0);
        odd.cost_usd = Some(f64::INFINITY);
        let changed = normalise(&mut odd);
        let fields: Vec<&str> = changed.iter().map(|change| change.field).collect();
        assert_eq!(
            fields,
            ["slice", "score", "input_tokens", "cost_usd", "ttft_ms"]
        );
        assert_eq!(odd.slice, "-");
        assert_eq!((odd.input_tokens, odd.cached_input_tokens), (None, Some(5)));
        assert_eq!((odd.ttft_ms, odd.total_ms), (None, Some(3.0)));
        assert!(check_values(&odd).is_ok());
    }
}
