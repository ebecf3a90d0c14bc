package upstreamsim

import (
	"time"
)

// The values and blobs of the schemas other than V3, V7 and V11 (whose
// values.go computes and writes). Every figure is, as there, a pure
// function of (network, stream, second).

// openStatus is the market status of V4, V8, V10 and V14 at a second whose
// trading second is te: 2 (open) while the market trades, else 1 (closed).
func openStatus(ts, te int64) uint32 {
	if te == ts {
		return 2
	}
	return 1
}

// v1Block0 and blockPeriod anchor the block numbers of V1 reports: a block every 12 s.
const (
	v1Block0    = 13_900_000
	blockPeriod = 12
)

func (st *stream) otherValues(v *reportValues, te int64) {
	m := &st.model
	switch st.schema {
	case SchemaV1:
		blockTs := v.ts - floorMod(v.ts-epoch2022, blockPeriod)
		v.block = uint64(v1Block0 + (blockTs-epoch2022)/blockPeriod)
		fillRandom(v.blockHash[:], m.seed, 60, blockTs)
		v.blockTime = blockTs
	case SchemaV4, SchemaV8, SchemaV10, SchemaV14:
		v.marketStatus = openStatus(v.ts, te)
		v.lastSeenNs = uint64(te)*1e9 - rnd(m.seed, 47, te)%1e9
	case SchemaV5:
		v.rateTime = floorDiv(v.ts, day) * day
	case SchemaV6:
		// The median, then the bid and ask, then twice as deep.
		spread := v.ask - v.bid
		v.prices = [5]int64{v.price, v.bid, v.ask, v.bid - spread, v.ask + spread}
	case SchemaV9:
		v.aum = int64(float64(v.price) * m.shares)
		v.rateTime = floorDiv(v.ts, day) * day
	case SchemaV12:
		v.nextPrice = nano(m.value(v.ts + day))
		v.rateTime = floorDiv(v.ts, day) * day
	case SchemaV13:
		v.bookVol = [2]uint64{uint64(m.volume * (0.2 + unit(m.seed, 45, v.ts))), uint64(m.volume * (0.2 + unit(m.seed, 44, v.ts)))}
		v.lastTraded = v.bid + int64(float64(v.ask-v.bid)*unit(m.seed, 46, te))
	}
	switch st.schema {
	case SchemaV10:
		v.multiplier = 1e9
		// The tokenized price trades around the clock: the model at ts,
		// with a small premium or discount of its own.
		v.tokenized = nano(m.value(v.ts) * (1 + 0.002*(2*unit(m.seed, 61, v.ts)-1)))
	case SchemaV14:
		v.contract = frontContract(v.ts)
		v.goldman = v.price - v.price/500
		v.interpGoldman = v.price - v.price/1000
	}
}

// frontContract is the front month of a monthly contract that expires on
// the 20th of the month before its delivery month (as WTI crude does,
// weekends and holidays ignored).
func frontContract(ts int64) futuresContract {
	t := time.Unix(ts, 0).UTC()
	y, mon, dd := t.Date()
	exp := time.Date(y, mon, 20, 0, 0, 0, 0, time.UTC)
	if dd >= 20 {
		exp = exp.AddDate(0, 1, 0)
	}
	delivery := exp.AddDate(0, 1, 0)
	bd := uint32(0)
	for d := time.Date(y, mon, 1, 0, 0, 0, 0, time.UTC); !d.After(t); d = d.AddDate(0, 0, 1) {
		if wd := d.Weekday(); wd != time.Saturday && wd != time.Sunday {
			bd++
		}
	}
	return futuresContract{
		expiry:      exp.Format(time.DateOnly),
		firstNotice: exp.AddDate(0, 0, 5).UnixNano(),
		month:       uint32(delivery.Month()),
		businessDay: max(bd, 1),
	}
}

func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }

// otherBlob writes the schema's own words after the header (words 1 to 5,
// which blob wrote; V1 has no such header and is written whole).
func (v *reportValues) otherBlob(b []byte) {
	w := func(i int) []byte { return b[i*word : (i+1)*word] }
	switch v.schema {
	case SchemaV1:
		putUint(w(1), uint64(v.ts))
		putInt(w(2), scaled(v.price))
		putInt(w(3), scaled(v.bid))
		putInt(w(4), scaled(v.ask))
		putUint(w(5), v.block)
		copy(w(6), v.blockHash[:])
		putUint(w(7), v.block-1)
		putUint(w(8), uint64(v.blockTime))
	case SchemaV2:
		putInt(w(6), scaled(v.price))
	case SchemaV4:
		putInt(w(6), scaled(v.price))
		putUint(w(7), uint64(v.marketStatus))
	case SchemaV5:
		putInt(w(6), scaled(v.price))
		putUint(w(7), uint64(v.rateTime))
		putUint(w(8), day)
	case SchemaV6:
		for i, p := range v.prices {
			putInt(w(6+i), scaled(p))
		}
	case SchemaV8:
		putUint(w(6), v.lastSeenNs)
		putInt(w(7), scaled(v.price))
		putUint(w(8), uint64(v.marketStatus))
	case SchemaV9:
		putInt(w(6), scaled(v.price))
		putUint(w(7), uint64(v.rateTime)*1000) // milliseconds
		putInt(w(8), scaled(v.aum))
		putUint(w(9), 0)
	case SchemaV10:
		putUint(w(6), v.lastSeenNs)
		putInt(w(7), scaled(v.price))
		putUint(w(8), uint64(v.marketStatus))
		putInt(w(9), scaled(v.multiplier))
		putInt(w(10), scaled(0))
		putUint(w(11), 0)
		putInt(w(12), scaled(v.tokenized))
	case SchemaV12:
		putInt(w(6), scaled(v.price))
		putInt(w(7), scaled(v.nextPrice))
		putUint(w(8), uint64(v.rateTime)*1e9) // nanoseconds
		putUint(w(9), 0)
	case SchemaV13:
		putInt(w(6), scaled(v.ask))
		putInt(w(7), scaled(v.bid))
		putUint(w(8), v.bookVol[0])
		putUint(w(9), v.bookVol[1])
		putInt(w(10), scaled(v.lastTraded))
	case SchemaV14:
		putInt(w(6), scaled(v.price))
		putInt(w(7), scaled(v.bid))
		putInt(w(8), scaled(v.ask))
		putUint(w(9), 17*word) // the offset of expiryTime's length word
		putUint(w(10), uint64(v.contract.firstNotice))
		putUint(w(11), v.lastSeenNs)
		putUint(w(12), uint64(v.marketStatus))
		putUint(w(13), uint64(v.contract.month))
		putInt(w(14), scaled(v.goldman))
		putUint(w(15), uint64(v.contract.businessDay))
		putInt(w(16), scaled(v.interpGoldman))
		putUint(w(17), uint64(len(v.contract.expiry)))
		clear(w(18))
		copy(w(18), v.contract.expiry)
	}
}
