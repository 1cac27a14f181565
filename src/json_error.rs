//! serde_json errors with their kind, so a reader can say which rule a text
//! broke (an unknown field, a duplicate key, a float) without reading the
//! error's message.
//!
//! serde_json tells syntax from data errors ([`serde_json::Error::classify`])
//! but not one data error from another: serde's derive makes them all
//! through the constructors of [`serde::de::Error`] (`unknown_field`,
//! `duplicate_field`, ...). [`from_str`] parses as `serde_json::from_str`
//! does, with every deserializer, visitor and access the derive sees wrapped
//! so that their error type is [`Tracked`]: each constructor makes
//! serde_json's own error (the same text, the position added by serde_json
//! as usual) and remembers which constructor it was. When the error crosses
//! back into serde_json, its kind is left in a cell for [`from_str`] to
//! return beside the error.
//!
//! Before each call into serde_json the cell is emptied, so a kind found
//! there after a failed call is that call's. A wrong type serde_json finds
//! itself (a float where a string belongs is reported before any visitor
//! runs) leaves it empty: the text is then parsed once more with every
//! typed request made as `deserialize_any`, so that the value reaches the
//! visitor and the derive's own constructor names the kind. The error
//! returned is always the first parse's.

use std::cell::Cell;
use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, Expected, MapAccess, SeqAccess, Unexpected,
    VariantAccess, Visitor,
};

/// Which rule a JSON text broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Not JSON (serde_json's syntax category).
    Syntax,
    /// The text ended inside a value.
    Eof,
    /// The reader failed (never for a string).
    Io,
    UnknownField,
    DuplicateField,
    MissingField,
    /// A floating-point number where none belongs (a wrong type or value
    /// that is a float).
    Float,
    InvalidType,
    InvalidValue,
    InvalidLength,
    UnknownVariant,
    /// A message of the type's own (`de::Error::custom`).
    Custom,
    /// A wrong type serde_json saw itself, before any visitor ran.
    Parser,
}

/// A serde_json error and the kind of rule it stands for.
#[derive(Debug)]
pub struct JsonError {
    pub kind: ErrorKind,
    pub error: serde_json::Error,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for JsonError {}

/// `serde_json::from_str`, the error classified by kind.
pub fn from_str<'de, T: de::Deserialize<'de>>(text: &'de str) -> Result<T, JsonError> {
    let (value, kind) = parse::<T>(text, false);
    value.map_err(|error| {
        let kind = match (error.classify(), kind) {
            (serde_json::error::Category::Syntax, _) => ErrorKind::Syntax,
            (serde_json::error::Category::Eof, _) => ErrorKind::Eof,
            (serde_json::error::Category::Io, _) => ErrorKind::Io,
            (serde_json::error::Category::Data, Some(kind)) => kind,
            (serde_json::error::Category::Data, None) => {
                parse::<T>(text, true).1.unwrap_or(ErrorKind::Parser)
            }
        };
        JsonError { kind, error }
    })
}

/// One parse of `text` with every access tracked (`loose`: typed requests
/// made as `deserialize_any`): the result and the kind left in the cell.
fn parse<'de, T: de::Deserialize<'de>>(
    text: &'de str,
    loose: bool,
) -> (serde_json::Result<T>, Option<ErrorKind>) {
    let cell = Cell::new(None);
    let mut de = serde_json::Deserializer::from_str(text);
    let value = T::deserialize(Track::new(&mut de, Ctx { cell: &cell, loose }))
        .map_err(|t| t.into_inner(&cell))
        .and_then(|v| de.end().map(|()| v));
    (value, cell.get())
}

/// An error on the derive's side of the wrapping: serde_json's error and,
/// when a constructor of this type made it, which one.
#[derive(Debug)]
pub struct Tracked<E> {
    kind: Option<ErrorKind>,
    inner: E,
}

impl<E> Tracked<E> {
    /// An error that came out of serde_json: its kind, if any, is already
    /// in the cell.
    fn through(inner: E) -> Self {
        Tracked { kind: None, inner }
    }

    /// Back to serde_json's error, its kind left in the cell.
    fn into_inner(self, cell: &Cell<Option<ErrorKind>>) -> E {
        if self.kind.is_some() {
            cell.set(self.kind);
        }
        self.inner
    }
}

impl<E: fmt::Display> fmt::Display for Tracked<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl<E: de::Error> std::error::Error for Tracked<E> {}

fn is_float(u: &Unexpected<'_>) -> bool {
    matches!(u, Unexpected::Float(_))
}

impl<E: de::Error> de::Error for Tracked<E> {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        made(ErrorKind::Custom, E::custom(msg))
    }
    fn invalid_type(unexp: Unexpected<'_>, exp: &dyn Expected) -> Self {
        let kind = if is_float(&unexp) {
            ErrorKind::Float
        } else {
            ErrorKind::InvalidType
        };
        made(kind, E::invalid_type(unexp, exp))
    }
    fn invalid_value(unexp: Unexpected<'_>, exp: &dyn Expected) -> Self {
        let kind = if is_float(&unexp) {
            ErrorKind::Float
        } else {
            ErrorKind::InvalidValue
        };
        made(kind, E::invalid_value(unexp, exp))
    }
    fn invalid_length(len: usize, exp: &dyn Expected) -> Self {
        made(ErrorKind::InvalidLength, E::invalid_length(len, exp))
    }
    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        made(
            ErrorKind::UnknownVariant,
            E::unknown_variant(variant, expected),
        )
    }
    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        made(ErrorKind::UnknownField, E::unknown_field(field, expected))
    }
    fn missing_field(field: &'static str) -> Self {
        made(ErrorKind::MissingField, E::missing_field(field))
    }
    fn duplicate_field(field: &'static str) -> Self {
        made(ErrorKind::DuplicateField, E::duplicate_field(field))
    }
}

fn made<E>(kind: ErrorKind, inner: E) -> Tracked<E> {
    Tracked {
        kind: Some(kind),
        inner,
    }
}

/// What every wrapper shares: the cell errors' kinds go to, and whether
/// typed requests are made as `deserialize_any`.
#[derive(Clone, Copy)]
struct Ctx<'c> {
    cell: &'c Cell<Option<ErrorKind>>,
    loose: bool,
}

/// A deserializer, visitor, access or seed of serde_json's (or the
/// derive's), wrapped: `T` with the cell its errors' kinds go to.
struct Track<'c, T> {
    it: T,
    cell: &'c Cell<Option<ErrorKind>>,
    ctx: Ctx<'c>,
}

impl<'c, T> Track<'c, T> {
    fn new(it: T, ctx: Ctx<'c>) -> Self {
        Track {
            it,
            cell: ctx.cell,
            ctx,
        }
    }

    fn wrap<U>(&self, it: U) -> Track<'c, U> {
        Track::new(it, self.ctx)
    }

    /// Before a call into serde_json: no kind yet.
    fn enter(&self) {
        self.cell.set(None);
    }
}

/// Calls into serde_json: the cell emptied first, the error wrapped.
macro_rules! call_in {
    ($self:ident, $call:expr) => {{
        $self.enter();
        $call.map_err(Tracked::through)
    }};
}

macro_rules! forward_deserialize {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {$(
        fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* v: V) -> Result<V::Value, Self::Error> {
            let w = self.wrap(v);
            call_in!(self, self.it.$method($($arg,)* w))
        }
    )*};
}

/// A typed request, made as `deserialize_any` in the loose parse.
macro_rules! loosen_deserialize {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {$(
        fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* v: V) -> Result<V::Value, Self::Error> {
            let w = self.wrap(v);
            if self.ctx.loose {
                $(let _ = $arg;)*
                return call_in!(self, self.it.deserialize_any(w));
            }
            call_in!(self, self.it.$method($($arg,)* w))
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Track<'_, D> {
    type Error = Tracked<D::Error>;

    forward_deserialize! {
        deserialize_any(); deserialize_i128(); deserialize_u128();
        deserialize_bytes(); deserialize_byte_buf(); deserialize_option();
        deserialize_newtype_struct(name: &'static str);
        deserialize_enum(name: &'static str, variants: &'static [&'static str]);
        deserialize_ignored_any();
    }

    loosen_deserialize! {
        deserialize_bool(); deserialize_i8(); deserialize_i16(); deserialize_i32();
        deserialize_i64(); deserialize_u8(); deserialize_u16(); deserialize_u32();
        deserialize_u64(); deserialize_f32(); deserialize_f64(); deserialize_char();
        deserialize_str(); deserialize_string(); deserialize_unit();
        deserialize_unit_struct(name: &'static str);
        deserialize_seq(); deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map();
        deserialize_struct(name: &'static str, fields: &'static [&'static str]);
        deserialize_identifier();
    }

    fn is_human_readable(&self) -> bool {
        self.it.is_human_readable()
    }
}

/// Visits with the wrapped visitor; its error, going back into serde_json,
/// leaves its kind in the cell.
macro_rules! forward_visit {
    ($($method:ident($ty:ty);)*) => {$(
        fn $method<E: de::Error>(self, x: $ty) -> Result<V::Value, E> {
            self.it.$method::<Tracked<E>>(x).map_err(|t| t.into_inner(self.cell))
        }
    )*};
}

macro_rules! forward_access {
    ($($method:ident($access:ident: $bound:ident, $wrapped:ty);)*) => {$(
        fn $method<A: $bound<'de>>(self, $access: A) -> Result<V::Value, A::Error> {
            let w: $wrapped = self.wrap($access);
            self.it.$method(w).map_err(|t| t.into_inner(self.cell))
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Track<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.it.expecting(f)
    }

    forward_visit! {
        visit_bool(bool); visit_i8(i8); visit_i16(i16); visit_i32(i32); visit_i64(i64);
        visit_i128(i128); visit_u8(u8); visit_u16(u16); visit_u32(u32); visit_u64(u64);
        visit_u128(u128); visit_f32(f32); visit_f64(f64); visit_char(char);
        visit_str(&str); visit_borrowed_str(&'de str); visit_string(String);
        visit_bytes(&[u8]); visit_borrowed_bytes(&'de [u8]); visit_byte_buf(Vec<u8>);
    }

    forward_access! {
        visit_some(d: Deserializer, Track<'_, A>);
        visit_newtype_struct(d: Deserializer, Track<'_, A>);
        visit_seq(s: SeqAccess, Track<'_, A>);
        visit_map(m: MapAccess, Track<'_, A>);
        visit_enum(e: EnumAccess, Track<'_, A>);
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.it
            .visit_none::<Tracked<E>>()
            .map_err(|t| t.into_inner(self.cell))
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.it
            .visit_unit::<Tracked<E>>()
            .map_err(|t| t.into_inner(self.cell))
    }
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Track<'_, S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        let w = self.wrap(d);
        self.it.deserialize(w).map_err(|t| t.into_inner(self.cell))
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Track<'_, A> {
    type Error = Tracked<A::Error>;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Self::Error> {
        let w = self.wrap(seed);
        call_in!(self, self.it.next_element_seed(w))
    }

    fn size_hint(&self) -> Option<usize> {
        self.it.size_hint()
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Track<'_, A> {
    type Error = Tracked<A::Error>;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        let w = self.wrap(seed);
        call_in!(self, self.it.next_key_seed(w))
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<T::Value, Self::Error> {
        let w = self.wrap(seed);
        call_in!(self, self.it.next_value_seed(w))
    }

    fn size_hint(&self) -> Option<usize> {
        self.it.size_hint()
    }
}

impl<'c, 'de, A: EnumAccess<'de>> EnumAccess<'de> for Track<'c, A> {
    type Error = Tracked<A::Error>;
    type Variant = Track<'c, A::Variant>;

    fn variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<(T::Value, Self::Variant), Self::Error> {
        let w = self.wrap(seed);
        let ctx = self.ctx;
        call_in!(self, self.it.variant_seed(w)).map(|(v, a)| (v, Track::new(a, ctx)))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Track<'_, A> {
    type Error = Tracked<A::Error>;

    fn unit_variant(self) -> Result<(), Self::Error> {
        call_in!(self, self.it.unit_variant())
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<T::Value, Self::Error> {
        let w = self.wrap(seed);
        call_in!(self, self.it.newtype_variant_seed(w))
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, v: V) -> Result<V::Value, Self::Error> {
        let w = self.wrap(v);
        call_in!(self, self.it.tuple_variant(len, w))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Self::Error> {
        let w = self.wrap(v);
        call_in!(self, self.it.struct_variant(fields, w))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct S {
        a: u64,
        #[serde(default)]
        b: Option<Vec<String>>,
    }

    fn kind(text: &str) -> ErrorKind {
        let e = from_str::<S>(text).unwrap_err();
        // The text is serde_json's own, position and all.
        assert_eq!(
            e.to_string(),
            serde_json::from_str::<S>(text).unwrap_err().to_string()
        );
        e.kind
    }

    #[test]
    fn each_rule_is_told_by_its_kind() {
        assert_eq!(kind(r#"{"a":1,"c":2}"#), ErrorKind::UnknownField);
        assert_eq!(kind(r#"{"a":1,"a":2}"#), ErrorKind::DuplicateField);
        assert_eq!(kind(r#"{"b":[]}"#), ErrorKind::MissingField);
        assert_eq!(kind(r#"{"a":1.5}"#), ErrorKind::Float);
        assert_eq!(kind(r#"{"a":-1}"#), ErrorKind::InvalidValue);
        assert_eq!(kind(r#"{"a":"x"}"#), ErrorKind::InvalidType);
        assert_eq!(kind(r#"{"a":1,"b":[1]}"#), ErrorKind::InvalidType);
        assert_eq!(kind(r#"{"a":1,"b":["x", 2.5]}"#), ErrorKind::Float);
        assert_eq!(
            kind(r#"{"a":1,"b":[99999999999999999999]}"#),
            ErrorKind::Float
        );
        assert_eq!(kind(r#"{"a":1"#), ErrorKind::Eof);
        assert_eq!(kind(r#"{"a":1}x"#), ErrorKind::Syntax);
        assert_eq!(
            kind(r#"{"a":1,"b":["x"],"b":null}"#),
            ErrorKind::DuplicateField
        );
    }

    #[test]
    fn a_good_text_parses_as_serde_json_parses_it() {
        let s: S = from_str(r#"{"a":7,"b":["x"]}"#).unwrap();
        assert_eq!((s.a, s.b), (7, Some(vec!["x".to_string()])));
        let raw: &serde_json::value::RawValue = from_str(r#"{"x": [1, 2]}"#).unwrap();
        assert_eq!(raw.get(), r#"{"x": [1, 2]}"#);
    }
}
