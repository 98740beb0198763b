//! GitHub Actions expressions (`${{ … }}` and `if:`), as the runner
//! evaluates them: literals, context paths, `!`, `==`, `!=`, `&&`, `||`,
//! parentheses and the functions the shipped workflows may call.

use serde_json::Value;

/// What an expression is evaluated against: the contexts, and the job's
/// status for `success()`, `failure()` and `always()`.
pub struct Scope<'a> {
    pub contexts: &'a serde_json::Map<String, Value>,
    pub failed: bool,
    /// The workspace, for `hashFiles`.
    pub workspace: &'a std::path::Path,
}

pub fn evaluate(text: &str, scope: &Scope<'_>) -> Value {
    let tokens = tokenize(text);
    let mut parser = Parser {
        tokens: &tokens,
        at: 0,
        scope,
    };
    let value = parser.or();
    assert!(
        parser.at == tokens.len(),
        "expression {text:?}: unexpected {:?}",
        tokens.get(parser.at)
    );
    value
}

/// Whether a step or job condition holds: a condition calling no status
/// function is `success() && (…)`, as GitHub reads it.
pub fn condition(text: Option<&str>, scope: &Scope<'_>) -> bool {
    let Some(text) = text else {
        return !scope.failed;
    };
    let text = text.trim();
    let text = text
        .strip_prefix("${{")
        .and_then(|inner| inner.strip_suffix("}}"))
        .unwrap_or(text);
    let calls_status = ["always(", "success(", "failure(", "cancelled("]
        .iter()
        .any(|function| text.contains(function));
    let value = truthy(&evaluate(text, scope));
    if calls_status {
        value
    } else {
        !scope.failed && value
    }
}

/// Replaces every `${{ … }}` in `text` with its value as a string.
pub fn interpolate(text: &str, scope: &Scope<'_>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${{") {
        out.push_str(&rest[..start]);
        let end = rest[start..]
            .find("}}")
            .unwrap_or_else(|| panic!("unclosed expression in {text:?}"));
        out.push_str(&as_string(&evaluate(&rest[start + 3..start + end], scope)));
        rest = &rest[start + end + 2..];
    }
    out.push_str(rest);
    out
}

pub fn as_string(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        Value::Bool(flag) => flag.to_string(),
        Value::Number(number) => number.to_string(),
        other => other.to_string(),
    }
}

pub fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(flag) => *flag,
        Value::Number(number) => number.as_f64() != Some(0.0),
        Value::String(text) => !text.is_empty(),
        _ => true,
    }
}

/// GitHub's loose equality: strings compare ignoring case, and a number
/// equals the string that spells it.
fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::String(a), Value::String(b)) => a.eq_ignore_ascii_case(b),
        (Value::Number(a), Value::String(b)) | (Value::String(b), Value::Number(a)) => {
            b.trim().parse::<f64>().ok() == a.as_f64()
        }
        (Value::Null, Value::String(text)) | (Value::String(text), Value::Null) => text.is_empty(),
        (a, b) => a == b,
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Text(String),
    Number(f64),
    Name(String),
    Symbol(&'static str),
}

fn tokenize(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        let c = chars[at];
        if c.is_whitespace() {
            at += 1;
        } else if c == '\'' {
            let mut literal = String::new();
            at += 1;
            loop {
                assert!(at < chars.len(), "unclosed string in {text:?}");
                if chars[at] == '\'' {
                    if chars.get(at + 1) == Some(&'\'') {
                        literal.push('\'');
                        at += 2;
                        continue;
                    }
                    at += 1;
                    break;
                }
                literal.push(chars[at]);
                at += 1;
            }
            tokens.push(Token::Text(literal));
        } else if c.is_ascii_digit() {
            let start = at;
            while at < chars.len() && (chars[at].is_ascii_digit() || chars[at] == '.') {
                at += 1;
            }
            let number: String = chars[start..at].iter().collect();
            tokens.push(Token::Number(number.parse().unwrap()));
        } else if c.is_alphabetic() || c == '_' {
            let start = at;
            while at < chars.len()
                && (chars[at].is_alphanumeric() || chars[at] == '_' || chars[at] == '-')
            {
                at += 1;
            }
            tokens.push(Token::Name(chars[start..at].iter().collect()));
        } else {
            let two: String = chars[at..(at + 2).min(chars.len())].iter().collect();
            let symbol = ["==", "!=", "&&", "||", "<=", ">="]
                .into_iter()
                .find(|symbol| *symbol == two);
            match symbol {
                Some(symbol) => {
                    tokens.push(Token::Symbol(symbol));
                    at += 2;
                }
                None => {
                    let one = ["!", "(", ")", "[", "]", ".", ",", "<", ">", "*"]
                        .into_iter()
                        .find(|symbol| symbol.starts_with(c))
                        .unwrap_or_else(|| panic!("unexpected {c:?} in {text:?}"));
                    tokens.push(Token::Symbol(one));
                    at += 1;
                }
            }
        }
    }
    tokens
}

struct Parser<'a, 's> {
    tokens: &'a [Token],
    at: usize,
    scope: &'a Scope<'s>,
}

impl Parser<'_, '_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn eat(&mut self, symbol: &'static str) -> bool {
        if self.peek() == Some(&Token::Symbol(symbol)) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn or(&mut self) -> Value {
        let mut value = self.and();
        while self.eat("||") {
            let right = self.and();
            if !truthy(&value) {
                value = right;
            }
        }
        value
    }

    fn and(&mut self) -> Value {
        let mut value = self.comparison();
        while self.eat("&&") {
            let right = self.comparison();
            if truthy(&value) {
                value = right;
            }
        }
        value
    }

    fn comparison(&mut self) -> Value {
        let left = self.unary();
        if self.eat("==") {
            Value::Bool(equal(&left, &self.unary()))
        } else if self.eat("!=") {
            Value::Bool(!equal(&left, &self.unary()))
        } else {
            left
        }
    }

    fn unary(&mut self) -> Value {
        if self.eat("!") {
            Value::Bool(!truthy(&self.unary()))
        } else {
            self.postfix()
        }
    }

    fn postfix(&mut self) -> Value {
        let mut value = self.primary();
        loop {
            if self.eat(".") {
                let Some(Token::Name(name)) = self.peek().cloned() else {
                    panic!("a property name after '.'");
                };
                self.at += 1;
                value = property(&value, &name);
            } else if self.eat("[") {
                let key = self.or();
                assert!(self.eat("]"));
                value = match (&value, &key) {
                    (Value::Array(items), Value::Number(index)) => items
                        .get(index.as_u64().unwrap() as usize)
                        .cloned()
                        .unwrap_or(Value::Null),
                    _ => property(&value, &as_string(&key)),
                };
            } else {
                return value;
            }
        }
    }

    fn primary(&mut self) -> Value {
        let token = self.peek().cloned().expect("an expression");
        self.at += 1;
        match token {
            Token::Text(text) => Value::String(text),
            Token::Number(number) => serde_json::json!(number),
            Token::Symbol("(") => {
                let value = self.or();
                assert!(self.eat(")"));
                value
            }
            Token::Name(name) if self.eat("(") => {
                let mut arguments = Vec::new();
                if !self.eat(")") {
                    loop {
                        arguments.push(self.or());
                        if self.eat(")") {
                            break;
                        }
                        assert!(self.eat(","), "',' between arguments of {name}");
                    }
                }
                self.call(&name, &arguments)
            }
            Token::Name(name) => match name.as_str() {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                "null" => Value::Null,
                _ => self
                    .scope
                    .contexts
                    .get(&name)
                    .cloned()
                    .unwrap_or_else(|| panic!("unknown context {name:?}")),
            },
            other => panic!("unexpected {other:?}"),
        }
    }

    fn call(&self, name: &str, arguments: &[Value]) -> Value {
        match name.to_ascii_lowercase().as_str() {
            "always" => Value::Bool(true),
            "success" => Value::Bool(!self.scope.failed),
            "failure" => Value::Bool(self.scope.failed),
            "cancelled" => Value::Bool(false),
            "fromjson" => serde_json::from_str(&as_string(&arguments[0]))
                .unwrap_or_else(|error| panic!("fromJSON({:?}): {error}", arguments[0])),
            "tojson" => Value::String(serde_json::to_string_pretty(&arguments[0]).unwrap()),
            "contains" => Value::Bool(match &arguments[0] {
                Value::Array(items) => items.iter().any(|item| equal(item, &arguments[1])),
                haystack => as_string(haystack)
                    .to_lowercase()
                    .contains(&as_string(&arguments[1]).to_lowercase()),
            }),
            "startswith" => Value::Bool(
                as_string(&arguments[0])
                    .to_lowercase()
                    .starts_with(&as_string(&arguments[1]).to_lowercase()),
            ),
            "format" => {
                let mut text = as_string(&arguments[0]);
                for (index, argument) in arguments[1..].iter().enumerate() {
                    text = text.replace(&format!("{{{index}}}"), &as_string(argument));
                }
                Value::String(text)
            }
            "hashfiles" => {
                let present = arguments
                    .iter()
                    .any(|pattern| self.scope.workspace.join(as_string(pattern)).is_file());
                Value::String(if present {
                    "hashed".to_owned()
                } else {
                    String::new()
                })
            }
            other => panic!("the runner does not know the function {other}()"),
        }
    }
}

fn property(value: &Value, name: &str) -> Value {
    match value {
        Value::Object(map) => map
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.clone())
            .unwrap_or(Value::Null),
        _ => Value::Null,
    }
}

#[test]
fn expressions_read_as_github_reads_them() {
    let contexts = serde_json::json!({
        "github": {"event_name": "pull_request", "event": {"pull_request": {"number": 7}}},
        "steps": {"changes": {"outputs": {"gate": "true"}}},
        "needs": {"plan": {"outputs": {"shards": "[\"1\",\"2\"]"}}},
        "env": {"EMPTY": ""},
    });
    let contexts = contexts.as_object().unwrap();
    let workspace = std::env::temp_dir();
    let scope = Scope {
        contexts,
        failed: false,
        workspace: &workspace,
    };
    let failed = Scope {
        contexts,
        failed: true,
        workspace: &workspace,
    };
    assert!(condition(
        Some("github.event_name == 'pull_request'"),
        &scope
    ));
    assert!(condition(
        Some("github.event_name == 'PULL_REQUEST' && steps.changes.outputs.gate == 'true'"),
        &scope
    ));
    assert!(!condition(
        Some("steps.changes.outputs.gate == 'true'"),
        &failed
    ));
    assert!(condition(
        Some("always() && steps.changes.outputs.gate == 'true'"),
        &failed
    ));
    assert!(!condition(
        Some("steps.missing.outputs.x == 'true'"),
        &scope
    ));
    assert!(condition(Some("steps.missing.outputs.x != 'true'"), &scope));
    assert!(condition(Some("env.EMPTY == ''"), &scope));
    assert_eq!(
        interpolate("routeval-${{ github.event.pull_request.number }}", &scope),
        "routeval-7"
    );
    assert_eq!(
        evaluate("fromJSON(needs.plan.outputs.shards)", &scope),
        serde_json::json!(["1", "2"])
    );
    assert!(condition(
        Some("${{ github.event_name == 'schedule' || github.event_name == 'pull_request' }}"),
        &scope
    ));
}
