package storefake_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/storefake"
)

// recording sets every ...Func field of s to a function that records its
// method's name with prefix in *got and returns zero values.
func recording(s *storefake.Store, prefix string, got *[]string) {
	v := reflect.ValueOf(s).Elem()
	for i := range v.NumField() {
		name, ok := strings.CutSuffix(v.Type().Field(i).Name, "Func")
		if !ok {
			continue
		}
		f := v.Field(i)
		f.Set(reflect.MakeFunc(f.Type(), func([]reflect.Value) []reflect.Value {
			*got = append(*got, prefix+name)
			out := make([]reflect.Value, f.Type().NumOut())
			for j := range out {
				out[j] = reflect.Zero(f.Type().Out(j))
			}
			return out
		}))
	}
}

// call calls st's method name with zero arguments (a live context).
func call(st store.Store, name string) {
	m := reflect.ValueOf(st).MethodByName(name)
	n := m.Type().NumIn()
	if m.Type().IsVariadic() {
		n--
	}
	args := make([]reflect.Value, n)
	for i := range n {
		if m.Type().In(i) == reflect.TypeFor[context.Context]() {
			args[i] = reflect.ValueOf(context.Background())
		} else {
			args[i] = reflect.Zero(m.Type().In(i))
		}
	}
	m.Call(args)
}

// TestEachMethodCallsItsFunc: every method of store.Store has a field, and
// calling the method calls that field, not another's.
func TestEachMethodCallsItsFunc(t *testing.T) {
	iface := reflect.TypeFor[store.Store]()
	var got []string
	s := &storefake.Store{}
	recording(s, "", &got)
	for i := range iface.NumMethod() {
		name := iface.Method(i).Name
		if _, ok := reflect.TypeFor[storefake.Store]().FieldByName(name + "Func"); !ok {
			t.Errorf("storefake.Store has no %sFunc field", name)
			continue
		}
		got = nil
		call(s, name)
		if len(got) != 1 || got[0] != name {
			t.Errorf("%s called %v, want [%s]", name, got, name)
		}
	}
}

// TestUnsetFuncsGoToBase: a method whose field is nil is Base's; a set
// field still wins over Base.
func TestUnsetFuncsGoToBase(t *testing.T) {
	var got []string
	base := &storefake.Store{}
	recording(base, "base.", &got)
	s := &storefake.Store{Base: base, PingFunc: func(context.Context) error { got = append(got, "own.Ping"); return nil }}
	iface := reflect.TypeFor[store.Store]()
	for i := range iface.NumMethod() {
		name := iface.Method(i).Name
		got = nil
		call(s, name)
		want := "base." + name
		if name == "Ping" {
			want = "own.Ping"
		}
		if len(got) != 1 || got[0] != want {
			t.Errorf("%s called %v, want [%s]", name, got, want)
		}
	}
}

// TestNeitherFuncNorBasePanics: a method nobody answers panics, naming
// itself, rather than answering zero values nobody chose.
func TestNeitherFuncNorBasePanics(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "storefake: GetByKey") {
			t.Fatalf("recovered %v, want a panic naming GetByKey", r)
		}
	}()
	_, _ = (&storefake.Store{}).GetByKey(t.Context(), "", "k")
}
