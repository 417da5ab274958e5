// Package jsonscan lends jsontext decoders over byte slices: the one-pass
// reader behind strictjson's check, the wire's type peek and the AG-UI
// member reads, which run on every frame and event the broker and the doors
// handle. A decoder is pooled, so a read allocates only what it keeps.
package jsonscan

import (
	"bytes"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
)

// Loose reads as encoding/json does: a repeated name is allowed (the
// reader decides which one counts) and invalid UTF-8 is replaced.
var Loose = []jsontext.Options{jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)}

// Reader is a decoder over one byte slice, lent by Open until Close.
type Reader struct {
	*jsontext.Decoder
	src bytes.Reader
}

var readers = sync.Pool{New: func() any {
	r := new(Reader)
	r.Decoder = jsontext.NewDecoder(&r.src)
	return r
}}

// Open lends a decoder reading b with opts. The caller must Close it and
// must not use it, nor any token or value it returned, after that.
func Open(b []byte, opts ...jsontext.Options) *Reader {
	r := readers.Get().(*Reader)
	r.src.Reset(b)
	r.Decoder.Reset(&r.src, opts...)
	return r
}

// Close gives the decoder back; it keeps no reference to the bytes read.
func (r *Reader) Close() {
	r.src.Reset(nil)
	r.Decoder.Reset(&r.src)
	readers.Put(r)
}
