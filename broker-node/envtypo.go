package main

import (
	"reflect"
	"sort"
	"strings"

	"github.com/funduq/funduq-go/core/config"
)

// misspelt pairs each FUNDUQ_ variable of environ that no funduq setting
// names with the broker node's setting it is within two edits of (a
// letter missed, added, changed, or two swapped): FUNDUQ_RETENTON=720h or
// FUNDUQ_LEASE_TLL=3s was ignored without a word, and the node ran on the
// default. A variable far from every setting (a script's, an agent's) is
// left alone: it may be meant for another program sharing the environment.
func misspelt(environ map[string]string) [][2]string {
	own := envKeys(reflect.TypeOf(config.Broker{}))
	known := map[string]bool{}
	for _, t := range []reflect.Type{reflect.TypeOf(config.Broker{}), reflect.TypeOf(config.LocalDoors{}),
		reflect.TypeOf(config.Migrate{})} {
		for _, k := range envKeys(t) {
			known[k] = true
		}
	}
	var out [][2]string
	for name := range environ {
		if !strings.HasPrefix(name, "FUNDUQ_") || known[name] {
			continue
		}
		for _, k := range own {
			if editDistance(name, k) <= 2 {
				out = append(out, [2]string{name, k})
				break
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// envKeys lists the env tags of t's fields, embedded structs included.
func envKeys(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			out = append(out, envKeys(f.Type)...)
			continue
		}
		if tag := f.Tag.Get("env"); tag != "" {
			out = append(out, strings.SplitN(tag, ",", 2)[0])
		}
	}
	sort.Strings(out)
	return out
}

// editDistance is the optimal string alignment distance of a and b:
// insertions, deletions, substitutions and adjacent transpositions.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
