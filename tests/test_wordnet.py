"""WordNet reader and the ImageNet-21k C-OOD filter, on the real WordNet 3.0 and timm lists."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from oodsim.data import imagenet_classes as ic
from oodsim.data import wordnet as wn
from oodsim.errors import DataNotFoundError, SpecError

pytestmark = pytest.mark.skipif(
    not (wn.resolve_root() / "data.noun").is_file(), reason="WordNet (wordnet-base) not installed"
)

VICEROY = "n02277268"  # viceroy, Limenitis archippus (ImageNet-21k), mimics monarch n02279972
MONARCH = "n02279972"
BEAR, BROWN_BEAR = "n02131653", "n02132136"
HEN_1K, HEN_21K = "n01514859", "n01792640"  # "adult female bird" vs "adult female chicken"
AILERON, WING = "n02685253", "n04592741"  # aileron is a part of wing (ImageNet-1k)
CUE_BALL = "n03145719"  # looks like ImageNet-1k's ping-pong ball n03942813
HAMMERHEAD, HAMMERHEAD_SPECIES = "n01494475", "n01494757"  # smooth hammerhead is a hammerhead
HALIBUT = "n02660640"  # Pacific halibut: kept by the WordNet rules


@pytest.fixture(scope="module")
def wordnet() -> wn.WordNet:
    return wn.load_wordnet()


@pytest.fixture(scope="module")
def default_filter() -> ic.FilterResult:
    return ic.filter_ood_classes()


def test_parse_line_reads_lemmas_and_noun_pointers() -> None:
    line = (
        "02132136 05 n 03 brown_bear 0 bruin 1 Ursus_arctos 0 005 @ 02131653 n 0000 "
        "#m 02131942 n 0000 ~ 02132466 n 0000 ~ 02132580 n 0000 + 01234567 v 0101 "
        "| large ferocious bear of Eurasia  \n"
    )
    synset = wn.parse_data_line(line)
    assert synset.wnid == BROWN_BEAR
    assert synset.lemmas == ("brown_bear", "bruin", "Ursus_arctos")
    assert dict(synset.pointers) == {"@": (2131653,), "#m": (2131942,), "~": (2132466, 2132580)}
    assert synset.gloss == "large ferocious bear of Eurasia"


def test_hex_word_count() -> None:
    words = " ".join(f"w{i} 0" for i in range(11))
    synset = wn.parse_data_line(f"00000042 03 n 0b {words} 000 | eleven words")
    assert len(synset.lemmas) == 11


def test_wordnet_graph(wordnet: wn.WordNet) -> None:
    assert len(wordnet) == 82115  # noun synsets of WordNet 3.0
    assert wordnet.lemmas(VICEROY)[0] == "viceroy"
    assert BEAR in wordnet.hypernyms(BROWN_BEAR)
    assert "n00001740" in wordnet.hypernyms(BROWN_BEAR)  # entity: transitive
    assert BROWN_BEAR in wordnet.hyponyms(BEAR)
    assert AILERON in wordnet.part_whole(WING)
    assert wn.load_wordnet() is wordnet  # parsed once per process


def test_missing_wordnet_says_where_and_how(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError, match="apt-get install wordnet-base") as info:
        wn.load_wordnet(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_wnid_validation(wordnet: wn.WordNet) -> None:
    with pytest.raises(SpecError):
        wn.wnid_to_offset("02132136")
    with pytest.raises(SpecError, match="noun synset"):
        wordnet.synset("n99999999")


def test_class_lists() -> None:
    one_k, all_21k, o_200 = ic.imagenet1k_wnids(), ic.imagenet21k_wnids(), ic.imagenet_o_wnids()
    assert len(one_k) == 1000 and list(one_k) == sorted(one_k)
    assert len(all_21k) == 21843
    assert len(o_200) == 200 and set(o_200) <= set(one_k)
    shared = Path(__file__).parents[2] / "shared" / "data" / "imagenet_o_wnids.txt"
    if shared.is_file():
        assert ic.imagenet_o_wnids(shared) == o_200


def test_default_filter_on_real_lists(default_filter: ic.FilterResult) -> None:
    result = default_filter
    counts = result.counts()
    print("kept", len(result.kept), counts)
    assert len(result.kept) + sum(counts.values()) == 21843
    assert counts["id_class"] == 999  # every ImageNet-1k class but teddy bear n04399382
    assert 500 < counts["hypernym_of_id"] < 1500
    assert 800 < counts["hyponym_of_id"] < 2500
    assert 50 < counts["part_whole"] < 500
    assert 100 < counts["shared_lemma"] < 1000
    assert counts["user_biological"] == counts["user_manmade"] == counts["too_few_samples"] == 0
    assert 15_000 < len(result.kept) < 20_000
    assert not set(result.kept) & set(ic.imagenet1k_wnids())
    assert VICEROY in result.kept  # hard biological look-alike kept by default
    assert CUE_BALL in result.kept
    assert result.excluded[BEAR] == f"hypernym_of_id:{BROWN_BEAR}"
    assert result.excluded[HEN_21K] == f"shared_lemma:{HEN_1K}"
    assert result.excluded[AILERON] == f"part_whole:{WING}"
    assert result.excluded[MONARCH] == "id_class"
    assert result.excluded[HAMMERHEAD_SPECIES] == f"hyponym_of_id:{HAMMERHEAD}"
    assert result.reason_kind(HAMMERHEAD_SPECIES) == "hyponym_of_id"


def test_user_lookalike_lists_and_sample_counts() -> None:
    candidates = [VICEROY, CUE_BALL, BEAR, HALIBUT]
    result = ic.filter_ood_classes(
        candidate_wnids=candidates,
        exclude_biological_lookalikes=[VICEROY],
        exclude_manmade_lookalikes=[CUE_BALL],
        min_samples=200,
        sample_counts={HALIBUT: 150},
    )
    assert result.excluded == {
        VICEROY: "user_biological",
        CUE_BALL: "user_manmade",
        BEAR: f"hypernym_of_id:{BROWN_BEAR}",
        HALIBUT: "too_few_samples",
    }
    assert result.kept == ()
    kept = ic.filter_ood_classes(candidate_wnids=candidates, exclude_hypernyms=False)
    assert kept.kept == tuple(candidates)


def test_filter_validates_inputs() -> None:
    with pytest.raises(SpecError, match="candidate_wnids"):
        ic.filter_ood_classes(candidate_wnids=["n99999999"])
    with pytest.raises(SpecError, match="sample_counts"):
        ic.filter_ood_classes(candidate_wnids=[VICEROY], min_samples=10)


def test_class_table_csv(default_filter: ic.FilterResult, tmp_path: Path) -> None:
    path = ic.write_class_table(default_filter, tmp_path / "classes.csv")
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 21843
    by_wnid = {row["wnid"]: row for row in rows}
    assert by_wnid[VICEROY] == {
        "wnid": VICEROY,
        "lemma": "viceroy, Limenitis archippus",
        "kept": "true",
        "reason": "",
    }
    assert by_wnid[BEAR]["kept"] == "false"
    assert sum(row["kept"] == "true" for row in rows) == len(default_filter.kept)


def test_class_table_never_writes_through_a_link(
    default_filter: ic.FilterResult, tmp_path: Path
) -> None:
    """Links at the table's path and at ``<path>.tmp`` (the fixed temporary name it used to
    write through, into whatever file the link named) are replaced, their targets untouched."""
    outside = tmp_path / "outside.txt"
    outside.write_text("someone else's file")
    path = tmp_path / "classes.csv"
    for link in (path, tmp_path / "classes.csv.tmp"):
        link.symlink_to(outside)
    ic.write_class_table(default_filter, path)
    assert outside.read_text() == "someone else's file"
    assert not path.is_symlink() and path.read_text().startswith("wnid,lemma,kept,reason")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "classes.csv",
        "classes.csv.tmp",
        "outside.txt",
    ]


def test_env_var_picks_the_wordnet_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(wn.ENV_VAR, str(tmp_path))
    assert wn.resolve_root() == tmp_path
    with pytest.raises(DataNotFoundError, match=str(tmp_path)):
        wn.load_wordnet()


def test_missing_timm_says_how_to_install(monkeypatch) -> None:
    ic._timm_list.cache_clear()
    monkeypatch.setattr(ic.importlib.util, "find_spec", lambda name: None)
    try:
        with pytest.raises(DataNotFoundError, match=r"pip install oodsim\[zoo\]"):
            ic.imagenet1k_wnids()
    finally:
        ic._timm_list.cache_clear()
