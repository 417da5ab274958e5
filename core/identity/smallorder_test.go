package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"math/big"
	"strings"
	"testing"
)

// The eight points of small order (canonical encodings), and non-canonical
// encodings crypto/ed25519 reads as some of them (y + p, x's sign set on
// x = 0).
var smallOrderKeys = []string{
	"0100000000000000000000000000000000000000000000000000000000000000", // neutral
	"ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // order 2
	"0000000000000000000000000000000000000000000000000000000000000000", // order 4
	"0000000000000000000000000000000000000000000000000000000000000080", // order 4
	"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a", // order 8
	"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa", // order 8
	"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05", // order 8
	"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85", // order 8
	"eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // neutral, y = p+1
	"edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // order 4, y = p
	"0100000000000000000000000000000000000000000000000000000000000080", // neutral, sign set
}

func TestSmallOrderKeys(t *testing.T) {
	for _, k := range smallOrderKeys {
		b, _ := hex.DecodeString(k)
		if !smallOrder(b) || !onCurveSmallOrder(b) {
			t.Errorf("%s: read as small order %v, on the curve %v", k, smallOrder(b), onCurveSmallOrder(b))
		}
	}
	// Every y listed is a small-order point's, with either sign of x.
	for _, y := range smallOrderY {
		for _, sign := range []byte{0, 0x80} {
			b := y
			b[31] |= sign
			if !onCurveSmallOrder(b[:]) {
				t.Errorf("%x is listed but not of small order", b)
			}
		}
	}
	for range 64 {
		pub, _, _ := ed25519.GenerateKey(rand.Reader)
		if smallOrder(pub) {
			t.Fatalf("generated key %x read as small order", pub)
		}
	}
	// Random encodings: most are points (of large or mixed order), none of
	// small order but with negligible chance.
	for range 64 {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		if smallOrder(b) || onCurveSmallOrder(b) {
			t.Fatalf("random encoding %x read as small order", b)
		}
	}
}

// The signature anyone can make under the neutral point verifies under
// crypto/ed25519 and is refused by Verify.
func TestVerifyRefusesSmallOrderKeys(t *testing.T) {
	pub, _ := hex.DecodeString(smallOrderKeys[0])
	sig := "01" + strings.Repeat("0", 126)
	raw, _ := hex.DecodeString(sig)
	if !ed25519.Verify(pub, []byte("anything"), raw) {
		t.Fatal("the premise: crypto/ed25519 should take this signature")
	}
	if err := Verify(pub, []byte("anything"), sig); err == nil {
		t.Fatal("Verify took a signature under the neutral point")
	}
	s, err := NewSignerFromSeedHex(strings.Repeat("a5", 32))
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(s.PublicKey(), []byte("x"), s.Sign([]byte("x"))); err != nil {
		t.Fatalf("an ordinary signature: %v", err)
	}
}

var (
	fieldP = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 255), big.NewInt(19))
	// curveD is -121665/121666 mod p.
	curveD = func() *big.Int {
		inv := new(big.Int).ModInverse(big.NewInt(121666), fieldP)
		d := new(big.Int).Mul(big.NewInt(-121665), inv)
		return d.Mod(d, fieldP)
	}()
	// sqrtM1 is a square root of -1 mod p: 2^((p-1)/4).
	sqrtM1 = new(big.Int).Exp(big.NewInt(2), new(big.Int).Rsh(new(big.Int).Sub(fieldP, big.NewInt(1)), 2), fieldP)
)

// onCurveSmallOrder is the test's oracle: it decodes pub as RFC 8032
// §5.1.3 does, reading y modulo p as crypto/ed25519 does, and doubles the
// point three times: a point of small order has an order dividing 8.
func onCurveSmallOrder(pub ed25519.PublicKey) bool {
	if len(pub) != ed25519.PublicKeySize {
		return false
	}
	le := make([]byte, len(pub))
	for i, b := range pub {
		le[len(pub)-1-i] = b
	}
	le[0] &= 0x7f // the sign of x: a point and its negation have one order
	y := new(big.Int).SetBytes(le)
	y.Mod(y, fieldP)
	x, ok := recoverX(y)
	if !ok {
		return false
	}
	// A point of small order has an order dividing 8.
	for range 3 {
		x, y = double(x, y)
	}
	return x.Sign() == 0 && y.Cmp(big.NewInt(1)) == 0
}

// recoverX solves x² = (y² - 1) / (d·y² + 1) mod p (RFC 8032 §5.1.3).
func recoverX(y *big.Int) (*big.Int, bool) {
	y2 := new(big.Int).Mul(y, y)
	u := new(big.Int).Sub(y2, big.NewInt(1))
	v := new(big.Int).Mul(curveD, y2)
	v.Add(v, big.NewInt(1))
	vInv := new(big.Int).ModInverse(v.Mod(v, fieldP), fieldP)
	if vInv == nil {
		return nil, false
	}
	x2 := u.Mul(u, vInv)
	x2.Mod(x2, fieldP)
	exp := new(big.Int).Add(fieldP, big.NewInt(3))
	exp.Rsh(exp, 3)
	x := new(big.Int).Exp(x2, exp, fieldP)
	if sq := new(big.Int).Mul(x, x); sq.Mod(sq, fieldP).Cmp(x2) != 0 {
		x.Mul(x, sqrtM1).Mod(x, fieldP)
		if sq := new(big.Int).Mul(x, x); sq.Mod(sq, fieldP).Cmp(x2) != 0 {
			return nil, false
		}
	}
	return x, true
}

// double adds (x, y) to itself on -x² + y² = 1 + d·x²·y².
func double(x, y *big.Int) (*big.Int, *big.Int) {
	xy := new(big.Int).Mul(x, y)
	xy.Mod(xy, fieldP)
	dxy2 := new(big.Int).Mul(xy, xy)
	dxy2.Mul(dxy2, curveD).Mod(dxy2, fieldP)
	// x3 = 2xy / (1 + d x²y²), y3 = (y² + x²) / (1 - d x²y²)
	xn := new(big.Int).Lsh(xy, 1)
	xd := new(big.Int).Add(big.NewInt(1), dxy2)
	yn := new(big.Int).Add(new(big.Int).Mul(y, y), new(big.Int).Mul(x, x))
	yd := new(big.Int).Sub(big.NewInt(1), dxy2)
	x3 := xn.Mul(xn, new(big.Int).ModInverse(xd.Mod(xd, fieldP), fieldP))
	y3 := yn.Mul(yn, new(big.Int).ModInverse(yd.Mod(yd, fieldP), fieldP))
	return x3.Mod(x3, fieldP), y3.Mod(y3, fieldP)
}
