//! Labelled prompts: the input of `routeval run` and the references `grade`
//! grades against. One prompt a row, in JSON lines (primary), CSV or
//! Parquet: `id`, `slice`, `prompt` or `messages`, `reference`, `rubric`,
//! and free metadata. Every row is checked, and the rubric it names must
//! exist, before anything is sent to a model.

mod read;

pub use read::{
    DatasetError, DatasetRow, Message, Role, for_each_prompt, for_each_row, read_dataset,
};
